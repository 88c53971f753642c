//! AVX-512 VNNI ([`Avx512Vnni`]): the 512-bit pair tiles of `zmm.rs` where they pay, and
//! otherwise (one activation row, few K-quant rows, an odd last group) the 256-bit tiles
//! stamped here with EVEX `vpdpbusd` as the integer dot.

// What the stamped tiles name (a macro's paths resolve where it is stamped).
use super::prefetch::{prefetch_per_block, prefetch_quants};
use super::ymm::{
    chunk_of, chunks_of, f16x4, f16x8, finish_k, k_quants, pair_sums, q5_high, simd_path, tile_of,
    CHUNKS,
};
use super::zmm::{self, has_zmm_tile};
use crate::kernels::quant::activations::{check_rows, XRow};
use crate::kernels::quant::group::{check_group, Group};
use crate::kernels::quant::quant_matrix::QuantMatrix;
use crate::kernels::quant::tile::{Rows, Tile, TileKernel, TileOut};
use crate::kernels::quant::weight_format::WeightFormat;
use crate::kernels::quant::{BLOCK, K_NR, MR, MR_256, MR_512, NR, SUB};
use std::arch::x86_64::*;
use std::ops::Range;

#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
fn dp_avx512_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(acc, u, s)
}

#[inline]
#[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
fn chunk4_avx512_vnni(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
    let acc = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w[0], x[0]);
    let acc = _mm256_dpbusd_epi32(acc, w[1], x[1]);
    let acc = _mm256_dpbusd_epi32(acc, w[2], x[2]);
    _mm256_dpbusd_epi32(acc, w[3], x[3])
}

simd_path!(
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
    true,
    dp_avx512_vnni,
    chunk4_avx512_vnni,
    chunk4_avx512_vnni
);

/// The AVX-512 VNNI tiles behind [`TileKernel`].
pub(in crate::kernels::quant) struct Avx512Vnni;

impl TileKernel for Avx512Vnni {
    /// [`MR_512`] rows where `format` has 512-bit tiles.
    fn tile_rows(format: WeightFormat) -> usize {
        if has_zmm_tile(format) {
            MR_512
        } else {
            MR_256
        }
    }

    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL and VNNI (with AVX2, FMA and F16C).
    unsafe fn tiles(
        m: &QuantMatrix,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &TileOut),
    ) {
        let (x, mr, first) = (rows.x, rows.mr, rows.first);
        // A lone activation row keeps the 256-bit tile: decode is memory-bound, and one
        // stream per group keeps the prefetcher ahead where two at once do not.
        // K-quant pair tiles from five rows up: below that their per-block setup of two
        // groups outweighs the wider dot.
        let wide = has_zmm_tile(m.format) && mr > if m.format.is_k_quant() { MR_256 } else { 1 };
        // SAFETY: the CPU supports this path (the caller's contract).
        unsafe {
            if !wide {
                match mr {
                    1 => tiles::<1>(m, groups, x, emit),
                    2 => tiles::<2>(m, groups, x, emit),
                    3 => tiles::<3>(m, groups, x, emit),
                    _ => tiles::<4>(m, groups, x, emit),
                }
                return;
            }
            match mr {
                2 => pairs::<2>(m, groups, x, first, emit),
                3 => pairs::<3>(m, groups, x, first, emit),
                4 => pairs::<4>(m, groups, x, first, emit),
                5 => pairs::<5>(m, groups, x, first, emit),
                6 => pairs::<6>(m, groups, x, first, emit),
                7 => pairs::<7>(m, groups, x, first, emit),
                _ => pairs::<8>(m, groups, x, first, emit),
            }
        }
    }
}

/// `groups` two at a time on the 512-bit tiles, an odd last group on the 256-bit one.
///
/// # Safety
/// As [`Avx512Vnni::tiles`].
unsafe fn pairs<const R: usize>(
    m: &QuantMatrix,
    groups: Range<usize>,
    x: &[XRow; MR],
    first: bool,
    emit: &mut impl FnMut(usize, &TileOut),
) {
    // SAFETY: the caller's contract.
    unsafe {
        let left = zmm::tiles::<R>(m, groups.clone(), x, first, emit);
        if left < groups.end {
            tiles::<R>(m, left..groups.end, x, emit);
        }
    }
}
