//! One weight group as the tiles read it ([`Group`]), where each quant sits in a group's
//! block, and the bounds check every SIMD tile makes of a group before its raw loads.
//!
//! Layout: weight rows are grouped by [`NR`](super::NR) (K-quants by
//! [`K_NR`](super::K_NR)); a group's blocks are interleaved (`[group][block][row in
//! group]`), so one tile reads a group's block contiguously. The quants are regrouped within
//! a group's block (see [`q4_at`], [`q8_at`], and [`q5_high_at`] for Q5's fifth bits) so that
//! one 32-byte vector holds the same four elements of each of the eight rows: one integer
//! lane per weight row, a whole block's dot product in it (on AVX-512, one 64-byte vector
//! holds two groups' side by side). The f16 scales (and Q4_1/Q5_1 minimums) stay f16:
//! decode reads the file's bytes, not more. Every buffer lives in `HugeBuf` chunks (huge
//! pages), as decode streams them all each step.

use super::weight_format::WeightFormat;
use super::{BLOCK, NR, SUB};

/// Where element `e` of row `j` sits in a Q4 group's block (`NR · 16` bytes): `(byte,
/// shift)`. The block's 32 elements form eight chunks of four (chunk `c`: elements
/// `4c..4c+4`); byte `32v + 4j + p` holds position `p` of row `j`'s chunk `2v` (low nibble)
/// and chunk `2v + 1` (high). One 32-byte load, masked or shifted, is one chunk of all
/// eight rows, one row per 32-bit lane, which meets the row's four activations broadcast:
/// each lane sums its row's whole block.
fn q4_at(j: usize, e: usize) -> (usize, u32) {
    let (c, p) = (e / 4, e % 4);
    (32 * (c / 2) + 4 * j + p, 4 * (c % 2) as u32)
}

/// The nibble of element `e` of row `j` in a Q4 group's block.
pub(super) fn q4_get(span: &[u8], j: usize, e: usize) -> u8 {
    let (at, shift) = q4_at(j, e);
    (span[at] >> shift) & 0x0F
}

/// Stores nibble `q` of element `e` of row `j` (the inverse of [`q4_get`]); `span` starts
/// zeroed.
pub(super) fn q4_put(span: &mut [u8], j: usize, e: usize, q: u8) {
    let (at, shift) = q4_at(j, e);
    span[at] |= (q & 0x0F) << shift;
}

/// Where the fifth bits of a Q5_0/Q5_1 group's block start: after its Q4 nibble bytes.
pub(super) const Q5_HIGH: usize = NR * BLOCK / 2;

/// Where element `e` of row `j`'s fifth bit sits in a Q5 group's block (`NR · 20` bytes):
/// `(byte, bit)`. The 32 bytes after the nibbles mirror one nibble vector (`q4_at`): byte
/// `4j + p` holds, at bit `c`, the fifth bit of position `p` of row `j`'s chunk `c`. So
/// one 32-byte load, each byte's bit `c` moved to bit 4, is chunk `c`'s fifth bits where
/// its nibbles sit (row `j`'s 32 bits are its four bytes `Q5_HIGH + 4j..`, in chunk order).
fn q5_high_at(j: usize, e: usize) -> (usize, u32) {
    (Q5_HIGH + 4 * j + e % 4, (e / 4) as u32)
}

/// The 5-bit quant of element `e` of row `j` in a Q5 group's block: its nibble, and its
/// fifth bit as bit 4.
pub(super) fn q5_get(span: &[u8], j: usize, e: usize) -> u8 {
    let (at, bit) = q5_high_at(j, e);
    q4_get(span, j, e) | ((span[at] >> bit) & 1) << 4
}

/// Stores 5-bit quant `q` of element `e` of row `j` (the inverse of [`q5_get`]); `span`
/// starts zeroed.
pub(super) fn q5_put(span: &mut [u8], j: usize, e: usize, q: u8) {
    q4_put(span, j, e, q & 0x0F);
    let (at, bit) = q5_high_at(j, e);
    span[at] |= (q >> 4 & 1) << bit;
}

/// Where element `e` of row `j` sits in a Q8_0 group's block (`NR · 32` bytes): chunks as
/// [`q4_at`]'s, chunk `c` of all eight rows being bytes `32c..32c + 32`, row `j`'s four at
/// `32c + 4j`.
pub(super) fn q8_at(j: usize, e: usize) -> usize {
    32 * (e / 4) + 4 * j + e % 4
}

/// One weight group's blocks, as the tile kernels read them.
#[derive(Clone, Copy)]
pub(super) struct Group<'a> {
    /// Weight rows in the group: [`NR`](super::NR), or [`K_NR`](super::K_NR) for K-quants.
    pub(super) rows: usize,
    pub(super) quants: &'a [u8],
    pub(super) scales: &'a [u16],
    pub(super) mins: &'a [u16],
    /// K-quants' sub-block scales; empty otherwise.
    pub(super) sub: &'a [u8],
    /// Q8_0's per-row block sums; empty otherwise.
    pub(super) sums: &'a [i16],
}

impl Group<'_> {
    pub(super) fn blocks(&self) -> usize {
        if self.sub.is_empty() {
            self.scales.len() / self.rows
        } else {
            self.sub.len() / (2 * self.rows)
        }
    }

    /// Whether every buffer of this group starts where `prev`'s ends: consecutive groups of
    /// one matrix, which the 512-bit pair tiles' prefetch relies on.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn follows(&self, prev: &Group) -> bool {
        fn after<T>(prev: &[T], next: &[T]) -> bool {
            prev.as_ptr_range().end == next.as_ptr()
        }
        after(prev.quants, self.quants)
            && after(prev.scales, self.scales)
            && after(prev.mins, self.mins)
            && after(prev.sums, self.sums)
    }
}

/// Checks every read of one weight group is in bounds, for the `blocks` its rows were
/// checked for.
#[inline(always)]
pub(super) fn check_group(w: &Group, blocks: usize, format: WeightFormat) {
    let gr = format.group_rows();
    assert!(w.rows == gr && w.blocks() == blocks);
    assert!(w.quants.len() >= blocks * gr * format.quant_bytes());
    assert!(!format.has_min() || w.mins.len() >= blocks * gr);
    assert!(format != WeightFormat::Q8_0 || w.sums.len() >= blocks * gr);
    if format.is_k_quant() {
        let supers = blocks.div_ceil(SUB) * gr;
        assert!(w.sub.len() >= 2 * blocks * gr && w.scales.len() >= supers);
        assert!(format == WeightFormat::Q6K || w.mins.len() >= supers);
    }
}
