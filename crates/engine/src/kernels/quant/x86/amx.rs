//! AMX int8 ([`Amx`]): sixteen activation rows against sixteen weight columns per
//! `tdpbssd`, one 32-block at a time, for every weight format; fewer rows than the
//! AVX-512 tiles take run on those ([`Avx512Vnni`]).
//!
//! A block's integer dot is exact on tiles as in vectors, but a tile multiply sums over
//! all the bytes it is given, so each one gets exactly one 32-block (K = 32: the A tile
//! 16 rows × 32 bytes, the B tile 8 rows × 64 bytes), and its int32 result goes through the
//! shared per-element float sequence (module doc of `quant`) with AVX-512 after
//! `tilestored`. Q6K's two 16-element halves keep their own integer dots: its B tile holds
//! eight weight rows twice, the first half's quants in columns 0..8 and the second's in
//! 8..16 (zeros elsewhere).
//!
//! Weights stay in the one layout every path reads (`group.rs`, `k_quants.rs`): the task's
//! first row tile unpacks its groups (`amx_layout.rs`) into B tiles (signed bytes, Q4_0/Q5_0/Q6K's offset
//! already taken, so a column's dot is the portable path's integer with its offset) and
//! their scales into f32, kept per thread for the task's later row tiles.
//!
//! The tile instructions come from a [`TileUnit`]: the hardware's, or the emulator's for
//! [`AmxEmulated`], which runs this file's logic on any AVX-512 CPU so the tests check it
//! bit for bit where no AMX unit exists.

use super::amx_layout::{
    groups_per_tile, pack_activations, unpack_weights, BlockScales, Line, B_ROWS, COLS,
};
use super::avx512_vnni::Avx512Vnni;
use crate::kernels::amx::{EmulatedTiles, HwTiles, TileConfig, TileUnit};
use crate::kernels::quant::activations::XRow;
use crate::kernels::quant::quant_matrix::QuantMatrix;
use crate::kernels::quant::tile::{Rows, TileKernel, TileOut};
use crate::kernels::quant::weight_format::WeightFormat;
use crate::kernels::quant::{BLOCK, MR, NR};
use std::cell::RefCell;
use std::ops::Range;

/// Tiles: activations of even blocks in tmm0, odd in tmm1 (16 × 32 bytes); weights in
/// tmm2 / tmm3 (8 × 64); their products in tmm4 / tmm7, so one block's multiply can run
/// while the previous block's result goes through the float sequence.
const CONFIG: TileConfig = TileConfig::new()
    .shape(0, MR as u8, BLOCK as u16)
    .shape(1, MR as u8, BLOCK as u16)
    .shape(2, B_ROWS as u8, 64)
    .shape(3, B_ROWS as u8, 64)
    .shape(4, MR as u8, 64)
    .shape(7, MR as u8, 64);

/// The AMX tiles behind [`TileKernel`].
pub(in crate::kernels::quant) struct Amx;

/// [`Amx`] with every tile instruction emulated in Rust: the same bits, slowly. A test
/// vehicle (`TOKENMILL_CPU_KERNEL=amx_int8_emulated`), never picked on its own.
pub(in crate::kernels::quant) struct AmxEmulated;

impl TileKernel for Amx {
    fn tile_rows(_: WeightFormat) -> usize {
        MR
    }

    /// # Safety
    /// The CPU must run AMX int8 (`amx_status`) and AVX-512 VNNI.
    unsafe fn tiles(
        m: &QuantMatrix,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &TileOut),
    ) {
        // SAFETY: the caller's contract.
        unsafe {
            if rows.mr <= Avx512Vnni::tile_rows(m.format) {
                return Avx512Vnni::tiles(m, groups, rows, emit);
            }
            tiles_hw(m, groups, rows, emit)
        }
    }
}

impl TileKernel for AmxEmulated {
    fn tile_rows(_: WeightFormat) -> usize {
        MR
    }

    /// # Safety
    /// The CPU must run AVX-512 VNNI (the tiles of few rows).
    unsafe fn tiles(
        m: &QuantMatrix,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &TileOut),
    ) {
        if rows.mr <= Avx512Vnni::tile_rows(m.format) {
            // SAFETY: the caller's contract.
            return unsafe { Avx512Vnni::tiles(m, groups, rows, emit) };
        }
        let mut unit = Box::<EmulatedTiles>::default();
        // SAFETY: the emulator touches only the buffers `run` hands it.
        unsafe { run(&mut *unit, m, groups, rows, emit) }
    }
}

/// # Safety
/// As [`Amx::tiles`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn tiles_hw(
    m: &QuantMatrix,
    groups: Range<usize>,
    rows: Rows,
    emit: &mut impl FnMut(usize, &TileOut),
) {
    // SAFETY: the caller's contract.
    unsafe { run(&mut HwTiles, m, groups, rows, emit) }
}

/// One thread's buffers: the task's weights as B tiles, the row tile's activations as A
/// tiles, and the two C results in flight.
#[derive(Default)]
struct Scratch {
    /// The matrix (its quants' address and width) and groups `weights` holds.
    key: Option<(usize, usize, Range<usize>)>,
    /// `[column tile][block][B_ROWS]` lines.
    weights: Vec<Line>,
    scales: Vec<BlockScales>,
    /// `[block][MR rows × 32 bytes]`, eight lines a block.
    acts: Vec<Line>,
    c: [[[i32; COLS]; MR]; 2],
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Multiplies `rows` (more than the AVX-512 tiles take) by every group of `groups`.
///
/// # Safety
/// `U`'s contract ([`TileUnit`]); for [`HwTiles`], a CPU with AMX int8 and AVX-512.
#[inline(always)]
unsafe fn run<U: TileUnit>(
    unit: &mut U,
    m: &QuantMatrix,
    groups: Range<usize>,
    rows: Rows,
    emit: &mut impl FnMut(usize, &TileOut),
) {
    let (format, blocks) = (m.format, m.cols / BLOCK);
    let (x, mr) = (rows.x, rows.mr);
    assert!(mr <= MR);
    for row in &x[..mr] {
        assert!(row.quants.len() >= m.cols && row.scales.len() >= blocks);
        assert!(!uses_sums(format) || row.sums.len() >= blocks);
        assert!(!format.is_k_quant() || row.copy.len() >= m.cols);
    }
    let per_tile = groups_per_tile(format);
    let tiles = groups.len().div_ceil(per_tile);
    SCRATCH.with_borrow_mut(|s| {
        let key = (m.quants.as_ptr() as usize, m.cols, groups.clone());
        if rows.first || s.key.as_ref() != Some(&key) {
            unpack_weights(m, groups.clone(), &mut s.weights, &mut s.scales);
            s.key = Some(key);
        }
        pack_activations(format, x, mr, blocks, &mut s.acts);
        let Scratch {
            weights,
            scales,
            acts,
            c,
            ..
        } = s;
        assert!(weights.len() >= tiles * blocks * B_ROWS && scales.len() >= tiles * blocks);
        assert!(acts.len() >= blocks * B_ROWS);
        // SAFETY: the caller's contract for the unit; every pointer below covers the
        // configured tile (asserted lengths).
        unsafe { unit.configure(&CONFIG) };
        for t in 0..tiles {
            let w = &weights[t * blocks * B_ROWS..][..blocks * B_ROWS];
            let sc = &scales[t * blocks..][..blocks];
            let mut acc = [[0f32; COLS]; MR];
            let mut mn = [[0f32; COLS]; MR];
            // SAFETY: as above.
            unsafe { multiply(unit, 0, acts, w, &mut c[0]) };
            for b in 0..blocks {
                if b + 1 < blocks {
                    // SAFETY: as above.
                    unsafe { multiply(unit, b + 1, acts, w, &mut c[(b + 1) % 2]) };
                }
                accumulate(format, b, &c[b % 2], &sc[b], &x[..mr], &mut acc, &mut mn);
            }
            let first = groups.start + t * per_tile;
            for g in first..(first + per_tile).min(groups.end) {
                emit(g, &finish(format, g - first, mr, &acc, &mn));
            }
        }
        // SAFETY: as above.
        unsafe { unit.release() };
    });
}

/// Block `b`'s tile multiply into `c`: tmm0/tmm2/tmm4 for even blocks, tmm1/tmm3/tmm7 for
/// odd ones.
///
/// # Safety
/// `U`'s contract, configured with [`CONFIG`]; `acts` and `w` hold block `b`.
#[inline(always)]
unsafe fn multiply<U: TileUnit>(
    unit: &mut U,
    b: usize,
    acts: &[Line],
    w: &[Line],
    c: &mut [[i32; COLS]; MR],
) {
    let a = acts[b * B_ROWS..][..B_ROWS].as_ptr().cast::<u8>();
    let bw = w[b * B_ROWS..][..B_ROWS].as_ptr().cast::<u8>();
    let out = c.as_mut_ptr().cast::<u8>();
    // SAFETY: the caller's contract; `a` is 16 rows of 32 bytes, `bw` 8 rows of 64, `out`
    // 16 rows of 64.
    unsafe {
        if b.is_multiple_of(2) {
            unit.load::<0>(a, BLOCK);
            unit.load::<2>(bw, 64);
            unit.zero::<4>();
            unit.dot::<4, 0, 2>();
            unit.store::<4>(out, 64);
        } else {
            unit.load::<1>(a, BLOCK);
            unit.load::<3>(bw, 64);
            unit.zero::<7>();
            unit.dot::<7, 1, 3>();
            unit.store::<7>(out, 64);
        }
    }
}

/// Whether `format` adds a minimum term `mw · d_x·Σx` per block.
fn uses_sums(format: WeightFormat) -> bool {
    matches!(
        format,
        WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q4K | WeightFormat::Q5K
    )
}

/// Block `b`'s integer dots `c` into each row's float sums, in the shared sequence:
/// `acc = fma(i, d_x·dw, acc)` (Q6K: `i` its two halves' dots times their scales) and
/// `mn = fma(mw, d_x·Σx, mn)`.
#[inline(always)]
// One index walks the int32 sums, the scales and both float sums at once.
#[allow(clippy::needless_range_loop)]
fn accumulate(
    format: WeightFormat,
    b: usize,
    c: &[[i32; COLS]; MR],
    s: &BlockScales,
    x: &[XRow],
    acc: &mut [[f32; COLS]; MR],
    mn: &mut [[f32; COLS]; MR],
) {
    for (r, row) in x.iter().enumerate() {
        let dx = row.scales[b];
        if format == WeightFormat::Q6K {
            let h = COLS / 2;
            for n in 0..h {
                let i = s.sc[n] * c[r][n] + s.sc[h + n] * c[r][h + n];
                acc[r][n] = (i as f32).mul_add(dx * s.dw[n], acc[r][n]);
            }
            continue;
        }
        for n in 0..COLS {
            acc[r][n] = (c[r][n] as f32).mul_add(dx * s.dw[n], acc[r][n]);
        }
        if uses_sums(format) {
            let sum = row.sums[b];
            for n in 0..COLS {
                mn[r][n] = s.mw[n].mul_add(sum, mn[r][n]);
            }
        }
    }
}

/// Group `gi` of a column tile as the portable path returns it: `acc` (Q4_0, Q5_0, Q8_0),
/// `acc + mn` (Q4_1, Q5_1), `acc − mn` (K-quants, Q6K's `mn` being zero).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn finish(
    format: WeightFormat,
    gi: usize,
    mr: usize,
    acc: &[[f32; COLS]; MR],
    mn: &[[f32; COLS]; MR],
) -> [[f32; NR]; MR] {
    let gr = format.group_rows();
    let mut out = [[0f32; NR]; MR];
    for r in 0..mr {
        for j in 0..gr {
            let n = gi * gr + j;
            out[r][j] = if format.is_k_quant() {
                acc[r][n] - mn[r][n]
            } else if uses_sums(format) {
                acc[r][n] + mn[r][n]
            } else {
                acc[r][n]
            };
        }
    }
    out
}
