//! The aarch64 path: NEON with the dot-product extension (`sdot`), for Q4_0, Q4_1, Q5_0,
//! Q5_1 and Q8_0.
//!
//! A group's block keeps the layout the x86 tiles read (`q4_at`, `q8_at`): one 16-byte
//! load is one chunk of four elements for four weight rows, and `sdot` against one lane of
//! the activations (the row's chunk) sums each weight row's four products in its own lane.
//! So a lane holds one weight row's whole-block integer dot, exactly the portable one (the
//! products and their sum are exact in i32), and the block's float steps are the portable
//! sequence: `s = x_scale · w_scale`, `acc = fma(dot, s, acc)`, and for Q4_1/Q5_1 the
//! minimum term in its own chain, added last. Hence the portable path's bits.
//!
//! `sdot`'s intrinsics are not stable Rust yet, so one instruction is inline assembly.

use super::activations::{check_rows, XRow};
use super::group::{check_group, Group};
use super::quant_matrix::QuantMatrix;
use super::tile::{Rows, Tile, TileKernel, TileOut};
use super::weight_format::WeightFormat;
use super::{BLOCK, MR, NR};
use half::f16;
use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

/// Chunks of four elements in a block.
const CHUNKS: usize = BLOCK / 4;

/// `acc + (w · lane L of x)`: lane `i` adds the four products of `w`'s bytes `4i..4i + 4`
/// with `x`'s bytes `4L..4L + 4`.
///
/// # Safety
/// The CPU must have the dot-product extension.
#[inline(always)]
unsafe fn sdot<const L: i32>(acc: int32x4_t, w: int8x16_t, x: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    // SAFETY: the caller's contract; registers only.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {x:v}.4b[{lane}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            x = in(vreg) x,
            lane = const L,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Chunk `c` of the block whose activations are `xs` (chunks 0–3 in the first register,
/// 4–7 in the second) against `w`, into `acc`.
///
/// # Safety
/// The CPU must have the dot-product extension.
#[inline(always)]
unsafe fn chunk(acc: int32x4_t, w: int8x16_t, xs: &[int8x16_t; 2], c: usize) -> int32x4_t {
    let x = xs[c / 4];
    // SAFETY: the caller's contract.
    unsafe {
        match c % 4 {
            0 => sdot::<0>(acc, w, x),
            1 => sdot::<1>(acc, w, x),
            2 => sdot::<2>(acc, w, x),
            _ => sdot::<3>(acc, w, x),
        }
    }
}

/// A group's eight f16 values for block `b` as two vectors of four f32 (weight rows 0–3,
/// 4–7).
fn f32x8(v: &[u16], b: usize) -> [float32x4_t; 2] {
    let w: [f32; NR] = std::array::from_fn(|j| f16::from_bits(v[b * NR + j]).to_f32());
    // SAFETY: `w` holds eight f32s.
    unsafe { [vld1q_f32(w.as_ptr()), vld1q_f32(w.as_ptr().add(4))] }
}

/// The NEON tiles behind [`TileKernel`] (Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0).
pub(super) struct Neon;

impl TileKernel for Neon {
    /// Every group of `groups` against the first `mr` (1–4) activation rows.
    ///
    /// # Safety
    /// The CPU must have NEON and the dot-product extension (`CpuKernel::NeonDotprod`).
    unsafe fn tiles(
        m: &QuantMatrix,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &TileOut),
    ) {
        let x = rows.x;
        // SAFETY: the caller's contract.
        unsafe {
            match rows.mr {
                1 => tiles_of::<1>(m, groups, x, emit),
                2 => tiles_of::<2>(m, groups, x, emit),
                3 => tiles_of::<3>(m, groups, x, emit),
                _ => tiles_of::<4>(m, groups, x, emit),
            }
        }
    }
}

/// # Safety
/// As [`Neon::tiles`].
#[target_feature(enable = "neon,dotprod")]
unsafe fn tiles_of<const R: usize>(
    m: &QuantMatrix,
    groups: Range<usize>,
    x: &[XRow; MR],
    emit: &mut impl FnMut(usize, &TileOut),
) {
    let (format, blocks) = (m.format, m.cols / BLOCK);
    check_rows::<R>(x, blocks, format);
    for g in groups {
        let w = m.group(g);
        check_group(&w, blocks, format);
        // SAFETY: the CPU has the features (caller's contract); the checks above bound
        // every load.
        let tile = unsafe {
            match format {
                WeightFormat::Q8_0 => q8_0::<R>(w, x, blocks),
                WeightFormat::Q4_0 => q4::<R, false, false>(w, x, blocks),
                WeightFormat::Q4_1 => q4::<R, true, false>(w, x, blocks),
                WeightFormat::Q5_0 => q4::<R, false, true>(w, x, blocks),
                WeightFormat::Q5_1 => q4::<R, true, true>(w, x, blocks),
                _ => unreachable!("K-quants take the portable rows on this path"),
            }
        };
        emit(g, &tile);
    }
}

/// The block's activations of row `x`: chunks 0–3, then 4–7.
///
/// # Safety
/// `x.quants` must hold block `b`.
#[inline(always)]
unsafe fn activations(x: &XRow, b: usize) -> [int8x16_t; 2] {
    // SAFETY: the caller's contract.
    unsafe {
        let p = x.quants.as_ptr().add(b * BLOCK);
        [vld1q_s8(p), vld1q_s8(p.add(16))]
    }
}

/// `acc = fma(dot, x_scale · w_scale, acc)` for one row's two halves of a group.
///
/// # Safety
/// NEON (always on aarch64).
#[inline(always)]
unsafe fn scale_in(acc: &mut [float32x4_t; 2], h: [int32x4_t; 2], xs: f32, dw: &[float32x4_t; 2]) {
    // SAFETY: registers only.
    unsafe {
        for half in 0..2 {
            let s = vmulq_f32(vdupq_n_f32(xs), dw[half]);
            acc[half] = vfmaq_f32(acc[half], vcvtq_f32_s32(h[half]), s);
        }
    }
}

/// The tile: row `r`'s two halves, plus Q4_1's minimum term.
fn tile_of<const R: usize>(
    acc: &[[float32x4_t; 2]; R],
    mn: Option<&[[float32x4_t; 2]; R]>,
) -> Tile {
    let mut out: Tile = Default::default();
    for r in 0..R {
        for half in 0..2 {
            // SAFETY: registers, and a store of four f32s into a row of eight.
            unsafe {
                let v = match mn {
                    Some(mn) => vaddq_f32(acc[r][half], mn[r][half]),
                    None => acc[r][half],
                };
                vst1q_f32(out[r].as_mut_ptr().add(4 * half), v);
            }
        }
    }
    out
}

/// `R` activation rows against one Q8_0 group: chunk `c` of weight rows 0–3 is bytes
/// `32c..32c + 16` of the block, of rows 4–7 the next 16; signed against signed, so no
/// bias is needed.
///
/// # Safety
/// As [`tiles`]; the group and rows hold `blocks` blocks.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn q8_0<const R: usize>(w: Group, x: &[XRow; MR], blocks: usize) -> Tile {
    let mut acc = [[vdupq_n_f32(0.0); 2]; R];
    for b in 0..blocks {
        // SAFETY: the caller bounds every load.
        unsafe {
            let wp = w.quants.as_ptr().add(b * NR * BLOCK) as *const i8;
            let wv: [[int8x16_t; 2]; CHUNKS] =
                std::array::from_fn(|c| [vld1q_s8(wp.add(32 * c)), vld1q_s8(wp.add(32 * c + 16))]);
            let dw = f32x8(w.scales, b);
            for r in 0..R {
                let xs = activations(&x[r], b);
                let mut h = [vdupq_n_s32(0); 2];
                for (c, wc) in wv.iter().enumerate() {
                    h[0] = chunk(h[0], wc[0], &xs, c);
                    h[1] = chunk(h[1], wc[1], &xs, c);
                }
                scale_in(&mut acc[r], h, *x[r].scales.get_unchecked(b), &dw);
            }
        }
    }
    tile_of(&acc, None)
}

/// `R` activation rows against one Q4_0 (`MIN = false`) or Q4_1 group, or with `HIGH` one
/// Q5_0 or Q5_1 group: bytes `32v..32v + 16` of a block hold chunk `2v` (low nibbles) and
/// `2v + 1` (high) of weight rows 0–3, the next 16 bytes those of rows 4–7; a Q5 block's
/// fifth bits follow in the same order, chunk `c`'s at bit `c` of each byte (`q5_high_at`),
/// and are shifted onto bit 4 of its nibbles. Quants are 0–31, so signed `sdot` takes them
/// as they are; Q4_0's offset of 8 (Q5_0's 16) is the dot's start, `−8Σx`, as on every
/// path.
///
/// # Safety
/// As [`tiles`]; the group and rows hold `blocks` blocks.
#[inline]
#[target_feature(enable = "neon,dotprod")]
// One index walks several register arrays at once (chunks, halves).
#[allow(clippy::needless_range_loop)]
unsafe fn q4<const R: usize, const MIN: bool, const HIGH: bool>(
    w: Group,
    x: &[XRow; MR],
    blocks: usize,
) -> Tile {
    let qb = if HIGH {
        WeightFormat::Q5_0.quant_bytes()
    } else {
        WeightFormat::Q4_0.quant_bytes()
    };
    let mut acc = [[vdupq_n_f32(0.0); 2]; R];
    let mut mn = [[vdupq_n_f32(0.0); 2]; R];
    for b in 0..blocks {
        // SAFETY: the caller bounds every load.
        unsafe {
            let wp = w.quants.as_ptr().add(b * NR * qb);
            let nib = vdupq_n_u8(0x0F);
            // wv[c][half]: chunk c of weight rows 4·half..4·half + 4.
            let mut wv = [[vdupq_n_s8(0); 2]; CHUNKS];
            // Q5's fifth bits of weight rows 0–3, then 4–7, after the nibbles.
            let high = if HIGH {
                let h = wp.add(NR * BLOCK / 2);
                [vld1q_u8(h), vld1q_u8(h.add(16))]
            } else {
                [vdupq_n_u8(0); 2]
            };
            for v in 0..CHUNKS / 2 {
                for half in 0..2 {
                    let raw = vld1q_u8(wp.add(32 * v + 16 * half));
                    let (mut lo, mut hi) = (vandq_u8(raw, nib), vshrq_n_u8::<4>(raw));
                    if HIGH {
                        // Bit c of each byte to bit 4 (a negative count shifts right).
                        let bit = |c: usize| {
                            let at4 = vshlq_u8(high[half], vdupq_n_s8(4 - c as i8));
                            vandq_u8(at4, vdupq_n_u8(0x10))
                        };
                        lo = vorrq_u8(lo, bit(2 * v));
                        hi = vorrq_u8(hi, bit(2 * v + 1));
                    }
                    wv[2 * v][half] = vreinterpretq_s8_u8(lo);
                    wv[2 * v + 1][half] = vreinterpretq_s8_u8(hi);
                }
            }
            let dw = f32x8(w.scales, b);
            let mw = if MIN { f32x8(w.mins, b) } else { dw };
            for r in 0..R {
                let xs = activations(&x[r], b);
                let start = if MIN {
                    0
                } else {
                    x[r].offsets.get_unchecked(b)[0]
                };
                let mut h = [vdupq_n_s32(start); 2];
                for (c, wc) in wv.iter().enumerate() {
                    h[0] = chunk(h[0], wc[0], &xs, c);
                    h[1] = chunk(h[1], wc[1], &xs, c);
                }
                scale_in(&mut acc[r], h, *x[r].scales.get_unchecked(b), &dw);
                if MIN {
                    let sum = vdupq_n_f32(*x[r].sums.get_unchecked(b));
                    for half in 0..2 {
                        mn[r][half] = vfmaq_f32(mn[r][half], mw[half], sum);
                    }
                }
            }
        }
    }
    if MIN {
        tile_of(&acc, Some(&mn))
    } else {
        tile_of(&acc, None)
    }
}
