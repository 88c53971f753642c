//! Software prefetch of the weight streams, shared by the 256-bit and 512-bit tiles: decode
//! reads each weight once, and the hardware prefetcher alone left the tiles waiting.

use std::arch::x86_64::*;

/// Blocks ahead of the one being read that the tiles prefetch (2 KiB of a Q4 group).
/// Decode streams each weight once; the hardware prefetcher alone leaves one-row tiles
/// (and the 512-bit tiles' two streams at any height) waiting on memory.
pub(super) const AHEAD: usize = 32;

/// Prefetches the quants [`AHEAD`] blocks past the block of `block_bytes` at `p`. Past
/// the group's end the addresses run into the next group's, which the task reads next;
/// past the matrix they point nowhere, harmless as a prefetch never faults (wrapping
/// arithmetic, as the address may leave the allocation).
#[inline(always)]
pub(super) fn prefetch_quants(p: *const u8, block_bytes: usize) {
    prefetch_lines(
        p.wrapping_add(AHEAD * block_bytes) as *const i8,
        block_bytes,
    );
}

/// Prefetches the cache line of `values` (`per_block` of them per block: scales,
/// minimums, sub-scales) [`AHEAD`] blocks past block `k`, once per line.
#[inline(always)]
pub(super) fn prefetch_per_block<T>(values: &[T], per_block: usize, k: usize) {
    if !values.is_empty() && starts_line(per_block * size_of::<T>(), k) {
        let p = values.as_ptr().wrapping_add((k + AHEAD) * per_block);
        prefetch_lines(p as *const i8, 1);
    }
}

/// Prefetches every cache line of the `bytes` at `p` (wrapping arithmetic: the address
/// may leave the allocation).
#[inline(always)]
pub(super) fn prefetch_lines(p: *const i8, bytes: usize) {
    for line in (0..bytes).step_by(64) {
        // SAFETY: a prefetch reads nothing architecturally and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line)) };
    }
}

/// Whether block `k` of values `bytes` a block long is where a new cache line's worth
/// starts: smaller per-block values are prefetched once per line, not once per block.
#[inline(always)]
pub(super) fn starts_line(bytes: usize, k: usize) -> bool {
    k.is_multiple_of((64 / bytes).max(1))
}
