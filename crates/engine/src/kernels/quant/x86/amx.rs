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
use crate::kernels::quant::group::{check_group, Group, Q5_HIGH};
#[cfg(test)]
use crate::kernels::quant::group::{q4_get, q5_get, q8_at};
#[cfg(test)]
use crate::kernels::quant::k_quants;
use crate::kernels::quant::quant_matrix::QuantMatrix;
use crate::kernels::quant::tile::{Rows, TileKernel, TileOut};
use crate::kernels::quant::weight_format::WeightFormat;
use crate::kernels::quant::{BLOCK, K_NR, MR, NR, SUB};
#[cfg(test)]
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
        assert!(!format.is_k_quant() || row.copy.len() >= m.cols);
    }
    let per_tile = groups_per_tile(format);
    let tiles = groups.len().div_ceil(per_tile);
    SCRATCH.with_borrow_mut(|s| {
        let key = (m.quants.as_ptr() as usize, m.cols, groups.clone());
        if rows.first || s.key.as_ref() != Some(&key) {
            unpack_weights(m, groups.clone(), s);
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

/// The element of a block that byte `i` of B row `r` holds (and A row byte `4r + i`): a
/// fixed order per format in which the weights unpack with a few vector operations.
/// Q8_0: the natural order. Q4/Q5: the stored chunks' low nibbles (chunks 0, 2, 4, 6) then
/// their high ones. K-quants: each stored chunk's first-half four then its second-half
/// four (the activations' `copy` order), so Q6K's halves are the even and odd rows.
fn element(format: WeightFormat, r: usize, i: usize) -> usize {
    match format {
        WeightFormat::Q8_0 => 4 * r + i,
        f if f.is_k_quant() => 4 * (r / 2) + 16 * (r % 2) + i,
        _ => 4 * (2 * (r % 4) + r / 4) + i,
    }
}

/// The row tile's activations as A tiles, each block's bytes in [`element`] order: block
/// `b`'s row `r` at line `8b + r / 2`, half `r % 2`; rows past `mr` zero.
fn pack_activations(
    format: WeightFormat,
    x: &[XRow; MR],
    mr: usize,
    blocks: usize,
    acts: &mut Vec<Line>,
) {
    acts.clear();
    acts.resize(blocks * B_ROWS, ZERO_LINE);
    for (r, row) in x.iter().enumerate().take(mr) {
        // K-quants' `copy` is already in their order; Q8_0's `quants` in its.
        let src = if format.is_k_quant() {
            &row.copy[..blocks * BLOCK]
        } else {
            &row.quants[..blocks * BLOCK]
        };
        for (b, q) in src.chunks_exact(BLOCK).enumerate() {
            let line = &mut acts[b * B_ROWS + r / 2].0;
            let dst = &mut line[BLOCK * (r % 2)..][..BLOCK];
            if format == WeightFormat::Q8_0 || format.is_k_quant() {
                for (d, &v) in dst.iter_mut().zip(q) {
                    *d = v as u8;
                }
                continue;
            }
            for (k, d) in dst.chunks_exact_mut(4).enumerate() {
                let e = element(format, k, 0);
                for (d, &v) in d.iter_mut().zip(&q[e..e + 4]) {
                    *d = v as u8;
                }
            }
        }
    }
}

/// Unpacks `groups` of `m` into B tiles and f32 scales: column tile `t` holds groups
/// `groups.start + t·per_tile ..`. Bytes no group fills keep what they held: a column of
/// no group is never handed on, and Q6K writes its zeros itself.
fn unpack_weights(m: &QuantMatrix, groups: Range<usize>, s: &mut Scratch) {
    let (format, blocks) = (m.format, m.cols / BLOCK);
    let per_tile = groups_per_tile(format);
    let tiles = groups.len().div_ceil(per_tile);
    if s.weights.len() < tiles * blocks * B_ROWS {
        s.weights.resize(tiles * blocks * B_ROWS, ZERO_LINE);
    }
    if s.scales.len() < tiles * blocks {
        s.scales.resize(tiles * blocks, BlockScales::default());
    }
    for (gi, g) in groups.enumerate() {
        let (t, slot) = (gi / per_tile, gi % per_tile);
        let w = m.group(g);
        check_group(&w, blocks, format);
        let lines = &mut s.weights[t * blocks * B_ROWS..][..blocks * B_ROWS];
        let scales = &mut s.scales[t * blocks..][..blocks];
        // SAFETY: every CPU that runs the AMX kernels has AVX2 and F16C (`Avx512Vnni`'s
        // requirements); `check_group` bounds the loads.
        unsafe { unpack_group(format, &w, slot, lines, scales) };
    }
}

/// Every block of group `w`, the `slot`-th of its column tile, into the tile's B rows
/// (`lines`, eight a block) and scales.
///
/// # Safety
/// AVX2 and F16C; `w` checked by `check_group` for `scales.len()` blocks.
#[target_feature(enable = "avx2,f16c")]
unsafe fn unpack_group(
    format: WeightFormat,
    w: &Group,
    slot: usize,
    lines: &mut [Line],
    scales: &mut [BlockScales],
) {
    for (b, (lines, s)) in lines.chunks_exact_mut(B_ROWS).zip(scales).enumerate() {
        // SAFETY: the caller's contract.
        unsafe {
            unpack_quants(format, w, b, slot, lines);
            block_scales(format, w, b, slot, s);
        }
    }
}

/// Where the quants of the `slot`-th group of a column tile go in a B row: `(first byte,
/// bytes)` of row `r`. Q6K's first-half rows (even `r`) fill columns 0..8, its second-half
/// rows columns 8..16.
fn placement(format: WeightFormat, slot: usize, r: usize) -> usize {
    match format {
        WeightFormat::Q6K => 16 * slot + 32 * (r % 2),
        f if f.is_k_quant() => 16 * slot,
        _ => 32 * slot,
    }
}

/// Block `b` of group `w`'s quants into the column tile's B rows, signed, each format's
/// offset taken (Q4_0 8, Q5_0 16, Q6K 32), in [`element`] order, with 256-bit operations.
///
/// # Safety
/// AVX2; `w` must hold block `b` (`check_group`).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn unpack_quants(
    format: WeightFormat,
    w: &Group,
    b: usize,
    slot: usize,
    lines: &mut [Line],
) {
    use std::arch::x86_64::*;
    let gr = format.group_rows();
    let qb = format.quant_bytes();
    let span = &w.quants[b * gr * qb..][..gr * qb];
    let p = span.as_ptr();
    let nib = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    // SAFETY: `span` is one block of the group (`gr · qb` bytes); every load below reads
    // inside it (the nibbles, then the high bits), every store one line's row bytes.
    unsafe {
        let load = |at: usize| _mm256_loadu_si256(p.add(at) as *const __m256i);
        let store = |lines: &mut [Line], r: usize, v: __m128i| {
            let at = placement(format, slot, r);
            _mm_storeu_si128(lines[r].0.as_mut_ptr().add(at) as *mut __m128i, v)
        };
        match format {
            WeightFormat::Q8_0 => {
                for (r, line) in lines.iter_mut().enumerate().take(B_ROWS) {
                    let dst = line.0.as_mut_ptr().add(placement(format, slot, r));
                    _mm256_storeu_si256(dst as *mut __m256i, load(32 * r));
                }
            }
            WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => {
                // Stored chunk `c` (all four rows, eight quants each) to B rows 2c (first
                // halves) and 2c + 1 (second halves), one 32-bit unit per row each.
                let halves = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
                let high16 =
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(64) as *const __m128i));
                for c in 0..4 {
                    let raw = load(32 * (c / 2));
                    let mut q = _mm256_and_si256(
                        if c % 2 == 0 {
                            raw
                        } else {
                            _mm256_srli_epi16::<4>(raw)
                        },
                        nib,
                    );
                    match format {
                        WeightFormat::Q5K => {
                            // Bit c + 4·(byte / 16) of byte % 16: each lane shifted by its own count.
                            let counts = _mm256_setr_epi32(
                                c as i32,
                                c as i32,
                                c as i32,
                                c as i32,
                                c as i32 + 4,
                                c as i32 + 4,
                                c as i32 + 4,
                                c as i32 + 4,
                            );
                            let bits = _mm256_and_si256(_mm256_srlv_epi32(high16, counts), one);
                            q = _mm256_or_si256(q, _mm256_slli_epi16::<4>(bits));
                        }
                        WeightFormat::Q6K => {
                            let h = _mm256_srlv_epi32(load(64), _mm256_set1_epi32(2 * c as i32));
                            let bits = _mm256_and_si256(h, _mm256_set1_epi8(3));
                            q = _mm256_or_si256(q, _mm256_slli_epi16::<4>(bits));
                            q = _mm256_sub_epi8(q, _mm256_set1_epi8(32));
                        }
                        _ => {}
                    }
                    let q = _mm256_permutevar8x32_epi32(q, halves);
                    store(lines, 2 * c, _mm256_castsi256_si128(q));
                    store(lines, 2 * c + 1, _mm256_extracti128_si256::<1>(q));
                    if format == WeightFormat::Q6K {
                        // The other half's columns of these rows stay zero: a row holds one
                        // half's quants.
                        let zero = _mm_setzero_si128();
                        for r in [2 * c, 2 * c + 1] {
                            let at = placement(format, slot, r ^ 1);
                            _mm_storeu_si128(lines[r].0.as_mut_ptr().add(at) as *mut __m128i, zero);
                        }
                    }
                }
            }
            _ => {
                // Q4/Q5: vector v's low nibbles are chunk 2v (B row v), its high ones chunk
                // 2v + 1 (B row 4 + v); Q5's fifth bit of chunk c is bit c of its high byte.
                let high = if format.is_q5() {
                    load(Q5_HIGH)
                } else {
                    _mm256_setzero_si256()
                };
                let offset = _mm256_set1_epi8(match format {
                    WeightFormat::Q4_0 => 8,
                    WeightFormat::Q5_0 => 16,
                    _ => 0,
                });
                for v in 0..4 {
                    let raw = load(32 * v);
                    for (half, r) in [(0, v), (1, 4 + v)] {
                        let c = 2 * v + half;
                        let mut q = _mm256_and_si256(
                            if half == 0 {
                                raw
                            } else {
                                _mm256_srli_epi16::<4>(raw)
                            },
                            nib,
                        );
                        if format.is_q5() {
                            let h = _mm256_srlv_epi32(high, _mm256_set1_epi32(c as i32));
                            q = _mm256_or_si256(
                                q,
                                _mm256_slli_epi16::<4>(_mm256_and_si256(h, one)),
                            );
                        }
                        let q = _mm256_sub_epi8(q, offset);
                        let dst = lines[r].0.as_mut_ptr().add(placement(format, slot, r));
                        _mm256_storeu_si256(dst as *mut __m256i, q);
                    }
                }
            }
        }
    }
}

/// Block `b` of group `w`'s scales into the column tile's: `dw` (K-quants `d·sc`, as the
/// portable row computes it: both exact), `mw`, and Q6K's half scales.
///
/// # Safety
/// AVX2 and F16C; `w` must hold block `b`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn block_scales(
    format: WeightFormat,
    w: &Group,
    b: usize,
    slot: usize,
    s: &mut BlockScales,
) {
    use std::arch::x86_64::*;
    let gr = format.group_rows();
    let at = slot * gr;
    // SAFETY: `check_group` bounds the group's scales, minimums and sub-scales for every
    // block; each store writes `gr` (4 or 8) floats of a 16-float row at `slot · gr`.
    unsafe {
        if !format.is_k_quant() {
            let f16x8 = |v: &[u16]| {
                _mm256_cvtph_ps(_mm_loadu_si128(v[b * NR..][..NR].as_ptr() as *const __m128i))
            };
            _mm256_storeu_ps(s.dw[at..at + NR].as_mut_ptr(), f16x8(w.scales));
            if format.has_min() {
                _mm256_storeu_ps(s.mw[at..at + NR].as_mut_ptr(), f16x8(w.mins));
            }
            return;
        }
        let f16x4 = |v: &[u16]| {
            let four = &v[(b / SUB) * K_NR..][..K_NR];
            _mm_cvtph_ps(_mm_loadl_epi64(four.as_ptr() as *const __m128i))
        };
        let bytes = |off: usize| {
            let four: [u8; 4] = w.sub[b * 2 * K_NR + off..][..K_NR]
                .try_into()
                .unwrap_or_default();
            _mm_cvtsi32_si128(i32::from_le_bytes(four))
        };
        let d = f16x4(w.scales);
        if format == WeightFormat::Q6K {
            _mm_storeu_ps(s.dw[at..at + K_NR].as_mut_ptr(), d);
            let h = COLS / 2;
            _mm_storeu_si128(
                s.sc[at..at + K_NR].as_mut_ptr() as *mut __m128i,
                _mm_cvtepi8_epi32(bytes(0)),
            );
            _mm_storeu_si128(
                s.sc[h + at..h + at + K_NR].as_mut_ptr() as *mut __m128i,
                _mm_cvtepi8_epi32(bytes(K_NR)),
            );
        } else {
            let sc = _mm_cvtepi32_ps(_mm_cvtepu8_epi32(bytes(0)));
            let m = _mm_cvtepi32_ps(_mm_cvtepu8_epi32(bytes(K_NR)));
            _mm_storeu_ps(s.dw[at..at + K_NR].as_mut_ptr(), _mm_mul_ps(d, sc));
            _mm_storeu_ps(
                s.mw[at..at + K_NR].as_mut_ptr(),
                _mm_mul_ps(f16x4(w.mins), m),
            );
        }
    }
}

/// Block `b` of group `w`'s scales one by one with `half`: the reference of
/// [`block_scales`].
#[cfg(test)]
fn block_scales_one_by_one(
    format: WeightFormat,
    w: &Group,
    b: usize,
    slot: usize,
    s: &mut BlockScales,
) {
    let gr = format.group_rows();
    let f32_of = |bits: u16| f16::from_bits(bits).to_f32();
    for j in 0..gr {
        let row = slot * gr + j;
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
#[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference of [`unpack_quants`]: every quant read one at a time through the
    /// layout's accessors and put where [`element`] and [`placement`] say.
    fn unpack_quants_one_by_one(
        format: WeightFormat,
        w: &Group,
        b: usize,
        slot: usize,
        lines: &mut [Line],
    ) {
        let (gr, qb) = (format.group_rows(), format.quant_bytes());
        let span = &w.quants[b * gr * qb..][..gr * qb];
        if format == WeightFormat::Q6K {
            // Its rows hold one half's quants: the other half's columns are zero.
            for (r, line) in lines.iter_mut().enumerate() {
                let other = placement(format, slot, r ^ 1);
                line.0[other..other + 16].fill(0);
            }
        }
        for (r, line) in lines.iter_mut().enumerate().take(B_ROWS) {
            for i in 0..4 {
                let e = element(format, r, i);
                for j in 0..gr {
                    let at = placement(format, slot, r) + 4 * j + i;
                    line.0[at] = quant(format, span, j, e) as u8;
                }
            }
        }
    }

    fn random_matrix(format: WeightFormat, n: usize, k: usize, seed: u32) -> QuantMatrix {
        let bb = format.ggml_block_bytes();
        let blocks = n * k / format.ggml_block_elems();
        let mut state = seed | 1;
        let mut data: Vec<u8> = (0..blocks * bb)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as u8
            })
            .collect();
        // Keep the f16 scales finite: clear each one's top exponent bit.
        for block in data.chunks_exact_mut(bb) {
            let at: &[usize] = match format {
                WeightFormat::Q6K => &[209],
                f if f.is_k_quant() => &[1, 3],
                WeightFormat::Q4_1 | WeightFormat::Q5_1 => &[1, 3],
                _ => &[1],
            };
            for &i in at {
                block[i] &= 0x3B;
            }
        }
        QuantMatrix::from_ggml(format, &data, n, k).expect("a whole matrix")
    }

    const FORMATS: [WeightFormat; 8] = [
        WeightFormat::Q4_0,
        WeightFormat::Q4_1,
        WeightFormat::Q5_0,
        WeightFormat::Q5_1,
        WeightFormat::Q8_0,
        WeightFormat::Q4K,
        WeightFormat::Q5K,
        WeightFormat::Q6K,
    ];

    #[test]
    fn vector_unpacking_puts_every_quant_and_scale_where_the_one_by_one_reference_does() {
        if !crate::kernels::cpu_kernel::CpuKernel::Avx2.is_supported() {
            println!("SKIPPED: no AVX2 and F16C (the AMX kernels' unpacking needs them)");
            return;
        }
        for format in FORMATS {
            let m = random_matrix(format, 24, 512, 7);
            let per_tile = groups_per_tile(format);
            for g in 0..24 / format.group_rows() {
                let w = m.group(g);
                for b in 0..512 / BLOCK {
                    let slot = g % per_tile;
                    // Stale bytes where Q6K must write its zeros.
                    let mut fast = [Line([0xAA; 64]); B_ROWS];
                    let mut slow = fast;
                    let mut fast_scales = BlockScales::default();
                    let mut slow_scales = BlockScales::default();
                    // SAFETY: AVX2 and F16C checked above; the group holds every block.
                    unsafe {
                        unpack_quants(format, &w, b, slot, &mut fast);
                        block_scales(format, &w, b, slot, &mut fast_scales);
                    }
                    unpack_quants_one_by_one(format, &w, b, slot, &mut slow);
                    block_scales_one_by_one(format, &w, b, slot, &mut slow_scales);
                    for r in 0..B_ROWS {
                        assert_eq!(
                            fast[r].0, slow[r].0,
                            "{format:?} group {g} block {b} row {r}"
                        );
                    }
                    let bits = |v: &[f32; COLS]| v.map(f32::to_bits);
                    assert_eq!(
                        bits(&fast_scales.dw),
                        bits(&slow_scales.dw),
                        "{format:?} dw"
                    );
                    assert_eq!(
                        bits(&fast_scales.mw),
                        bits(&slow_scales.mw),
                        "{format:?} mw"
                    );
                    assert_eq!(fast_scales.sc, slow_scales.sc, "{format:?} sc");
                }
            }
        }
    }

    #[test]
    fn every_block_order_is_a_permutation_the_activations_follow() {
        for format in FORMATS {
            let mut seen = [false; BLOCK];
            for r in 0..B_ROWS {
                for i in 0..4 {
                    seen[element(format, r, i)] = true;
                }
            }
            assert!(seen.iter().all(|&s| s), "{format:?}");
        }
        // The K-quants' order is the activations' `copy` chunk order: chunk c's first-half
        // four, then its second-half four.
        assert_eq!(element(WeightFormat::Q4K, 1, 0), 16);
        assert_eq!(element(WeightFormat::Q4K, 2, 3), 7);
    }
}
