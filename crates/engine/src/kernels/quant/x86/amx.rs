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
//! first row tile unpacks its groups into B tiles (signed bytes, Q4_0/Q5_0/Q6K's offset
//! already taken, so a column's dot is the portable path's integer with its offset) and
//! their scales into f32, kept per thread for the task's later row tiles.
//!
//! The tile instructions come from a [`TileUnit`]: the hardware's, or the emulator's for
//! [`AmxEmulated`], which runs this file's logic on any AVX-512 CPU so the tests check it
//! bit for bit where no AMX unit exists.

use super::avx512_vnni::Avx512Vnni;
use crate::kernels::amx::{EmulatedTiles, HwTiles, TileConfig, TileUnit};
use crate::kernels::quant::activations::XRow;
use crate::kernels::quant::group::{q4_get, q5_get, q8_at, Group};
use crate::kernels::quant::k_quants;
use crate::kernels::quant::quant_matrix::QuantMatrix;
use crate::kernels::quant::tile::{Rows, TileKernel, TileOut};
use crate::kernels::quant::weight_format::WeightFormat;
use crate::kernels::quant::{BLOCK, K_NR, MR, NR, SUB};
use half::f16;
use std::cell::RefCell;
use std::ops::Range;

/// Output columns of one tile multiply (a C tile's sixteen int32s a row).
const COLS: usize = 16;
/// Rows of one B tile: a 32-block's bytes in groups of four.
const B_ROWS: usize = BLOCK / 4;

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

/// One 64-byte line, aligned as tile rows load best.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

const ZERO_LINE: Line = Line([0; 64]);

/// The scales of one column tile's block, as the float sequence takes them: `dw` the
/// weight scale (K-quants: `d·sc`; Q6K: `d`), `mw` the minimum (`m`, or `dmin·m`), `sc` Q6K's
/// half-block scales (columns 0..8 the first half's, 8..16 the second's).
#[derive(Clone, Copy, Default)]
struct BlockScales {
    dw: [f32; COLS],
    mw: [f32; COLS],
    sc: [i32; COLS],
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

/// Weight groups per column tile: sixteen weight rows (Q6K: eight, each twice).
fn groups_per_tile(format: WeightFormat) -> usize {
    match format {
        WeightFormat::Q6K => 2,
        f if f.is_k_quant() => COLS / K_NR,
        _ => COLS / NR,
    }
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
    }
    let per_tile = groups_per_tile(format);
    let tiles = groups.len().div_ceil(per_tile);
    SCRATCH.with_borrow_mut(|s| {
        let key = (m.quants.as_ptr() as usize, m.cols, groups.clone());
        if rows.first || s.key.as_ref() != Some(&key) {
            unpack_weights(m, groups.clone(), s);
            s.key = Some(key);
        }
        pack_activations(x, mr, blocks, &mut s.acts);
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
        if b % 2 == 0 {
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

/// The row tile's activations as A tiles: block `b`'s 32 quants of row `r` at line
/// `8b + r / 2`, half `r % 2`; rows past `mr` zero.
fn pack_activations(x: &[XRow; MR], mr: usize, blocks: usize, acts: &mut Vec<Line>) {
    acts.clear();
    acts.resize(blocks * B_ROWS, ZERO_LINE);
    for (r, row) in x.iter().enumerate().take(mr) {
        for (b, q) in row.quants[..blocks * BLOCK].chunks_exact(BLOCK).enumerate() {
            let line = &mut acts[b * B_ROWS + r / 2].0;
            let half = BLOCK * (r % 2);
            for (d, &v) in line[half..half + BLOCK].iter_mut().zip(q) {
                *d = v as u8;
            }
        }
    }
}

/// Unpacks `groups` of `m` into B tiles and f32 scales: column tile `t` holds groups
/// `groups.start + t·per_tile ..`, its columns past the last group zero.
fn unpack_weights(m: &QuantMatrix, groups: Range<usize>, s: &mut Scratch) {
    let (format, blocks) = (m.format, m.cols / BLOCK);
    let per_tile = groups_per_tile(format);
    let tiles = groups.len().div_ceil(per_tile);
    s.weights.clear();
    s.weights.resize(tiles * blocks * B_ROWS, ZERO_LINE);
    s.scales.clear();
    s.scales.resize(tiles * blocks, BlockScales::default());
    for (gi, g) in groups.enumerate() {
        let (t, slot) = (gi / per_tile, gi % per_tile);
        let w = m.group(g);
        for b in 0..blocks {
            let lines = &mut s.weights[(t * blocks + b) * B_ROWS..][..B_ROWS];
            unpack_block(format, &w, b, slot, lines, &mut s.scales[t * blocks + b]);
        }
    }
}

/// Block `b` of group `w`, the `slot`-th group of its column tile, into the tile's B rows
/// (`lines[k / 4]`, bytes `4n + k % 4`) and scales.
fn unpack_block(
    format: WeightFormat,
    w: &Group,
    b: usize,
    slot: usize,
    lines: &mut [Line],
    s: &mut BlockScales,
) {
    let gr = format.group_rows();
    let qb = format.quant_bytes();
    let span = &w.quants[b * gr * qb..][..gr * qb];
    let f32_of = |bits: u16| f16::from_bits(bits).to_f32();
    for j in 0..gr {
        let row = slot * gr + j;
        for e in 0..BLOCK {
            let q = quant(format, span, j, e);
            // Q6K: the first half's quants in columns 0..8, the second's in 8..16.
            let n = match format {
                WeightFormat::Q6K if e >= BLOCK / 2 => COLS / 2 + row,
                _ => row,
            };
            lines[e / 4].0[4 * n + e % 4] = q as u8;
        }
        if format.is_k_quant() {
            let at = (b / SUB) * gr + j;
            let (lo, hi) = (w.sub[b * 2 * gr + j], w.sub[b * 2 * gr + gr + j]);
            let d = f32_of(w.scales[at]);
            if format == WeightFormat::Q6K {
                s.dw[row] = d;
                s.sc[row] = lo as i8 as i32;
                s.sc[COLS / 2 + row] = hi as i8 as i32;
            } else {
                s.dw[row] = d * lo as f32;
                s.mw[row] = f32_of(w.mins[at]) * hi as f32;
            }
        } else {
            s.dw[row] = f32_of(w.scales[b * gr + j]);
            if format.has_min() {
                s.mw[row] = f32_of(w.mins[b * gr + j]);
            }
        }
    }
}

/// Quant `e` of row `j` in a block `span`, signed, its format's offset taken: so a tile's
/// integer dot equals the portable path's dot plus its offset term.
fn quant(format: WeightFormat, span: &[u8], j: usize, e: usize) -> i8 {
    match format {
        WeightFormat::Q8_0 => span[q8_at(j, e)] as i8,
        WeightFormat::Q4_0 => q4_get(span, j, e) as i8 - 8,
        WeightFormat::Q4_1 => q4_get(span, j, e) as i8,
        WeightFormat::Q5_0 => q5_get(span, j, e) as i8 - 16,
        WeightFormat::Q5_1 => q5_get(span, j, e) as i8,
        WeightFormat::Q4K | WeightFormat::Q5K => k_quants::get(format, span, j, e) as i8,
        WeightFormat::Q6K => k_quants::get(format, span, j, e) as i8 - 32,
    }
}
