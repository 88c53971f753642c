//! What one tile takes and gives ([`Rows`] of activations, a [`Tile`] of results), and
//! [`TileKernel`], the one trait each instruction set's tiles sit behind: `matmul.rs`
//! picks an implementation once per run of groups from the `CpuKernel`, by a `match` whose
//! arms call it directly (static dispatch, monomorphised; no vtable on the path).

use super::activations::XRow;
use super::quant_matrix::QuantMatrix;
use super::weight_format::WeightFormat;
use super::{MR, MR_256, MR_512, NR};
use std::ops::Range;

/// One vector tile's result: `[activation row][weight row in group]`, as many rows as
/// the widest vector tile takes (the AMX tiles keep their own sixteen).
pub(super) type Tile = [[f32; NR]; MR_512];

/// What a tile hands on: its first `mr` rows (or more; the sinks read `mr`).
pub(super) type TileOut = [[f32; NR]];

/// One tile's activation rows: `x[..mr]` (the rest repeat the last), and whether they are
/// the first a task runs, whose tiles read its weights from memory.
#[derive(Clone, Copy)]
pub(super) struct Rows<'r, 'a> {
    pub(super) x: &'r [XRow<'a>; MR],
    pub(super) mr: usize,
    // Only the x86 512-bit tiles tell first row tiles apart.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(super) first: bool,
}

/// One instruction set's tiles. An implementation is a unit struct in its own file; its
/// tiles compute each output element in the shared sequence (module doc of `quant`), so
/// every implementation gives the portable one's bits.
pub(super) trait TileKernel {
    /// Activation rows per tile of `format`: [`MR_256`] unless the tiles hold more.
    fn tile_rows(format: WeightFormat) -> usize {
        let _ = format;
        MR_256
    }

    /// Every group of `groups` against the activation rows, each tile handed to `emit`
    /// in ascending group order. One dispatch and one bounds check of the rows per run
    /// of groups, not per tile: at one activation row a tile is only a few hundred
    /// instructions.
    ///
    /// # Safety
    /// The CPU must support the instruction set (`CpuKernel::is_supported`).
    unsafe fn tiles(
        m: &QuantMatrix,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &TileOut),
    );
}
