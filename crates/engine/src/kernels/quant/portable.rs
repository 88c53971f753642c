//! The portable path ([`Portable`]): one activation row against one weight group at a time,
//! in the shared per-element sequence, plain Rust. Every SIMD tile must give its bits;
//! it is what `CpuKernel::Portable` runs, and what any kernel without a tile for a format
//! (NEON's K-quants) falls back to.

use super::activations::XRow;
use super::group::{q4_get, q5_get, q8_at, Group};
use super::k_quants;
use super::quant_matrix::QuantMatrix;
use super::tile::{Rows, Tile, TileKernel, TileOut};
use super::weight_format::WeightFormat;
use super::{BLOCK, K_NR, NR};
use half::f16;
use std::ops::Range;

/// The portable tiles: each of a tile's rows on its own, against each weight row.
pub(super) struct Portable;

impl TileKernel for Portable {
    /// # Safety
    /// None beyond the trait's: plain Rust runs on every CPU.
    unsafe fn tiles(
        m: &QuantMatrix,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &TileOut),
    ) {
        let (format, x, mr) = (m.format, rows.x, rows.mr);
        for g in groups {
            let w = m.group(g);
            let mut out: Tile = Default::default();
            for (o, row) in out.iter_mut().zip(x).take(mr) {
                if format.is_k_quant() {
                    o[..K_NR].copy_from_slice(&k_quants::row(format, w, row));
                } else {
                    *o = self::row(format, w, row);
                }
            }
            emit(g, &out);
        }
    }
}

/// One activation row against one weight group, in the shared per-element sequence.
fn row(format: WeightFormat, w: Group, x: &XRow) -> [f32; NR] {
    let qb = w.quants.len() / (w.blocks() * NR).max(1);
    let mut acc = [0f32; NR];
    let mut mn = [0f32; NR];
    for b in 0..w.blocks() {
        let xb = &x.quants[b * BLOCK..(b + 1) * BLOCK];
        let span = &w.quants[b * NR * qb..(b + 1) * NR * qb];
        for j in 0..NR {
            let at = b * NR + j;
            let s = x.scales[b] * f16::from_bits(w.scales[at]).to_f32();
            let i = match format {
                WeightFormat::Q8_0 => dot(|e| span[q8_at(j, e)] as i8 as i32, xb),
                WeightFormat::Q4_0 => dot(|e| q4_get(span, j, e) as i32, xb) + x.offsets[b][0],
                WeightFormat::Q4_1 => dot(|e| q4_get(span, j, e) as i32, xb),
                WeightFormat::Q5_0 => dot(|e| q5_get(span, j, e) as i32, xb) + x.offsets[b][0],
                WeightFormat::Q5_1 => dot(|e| q5_get(span, j, e) as i32, xb),
                WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => {
                    unreachable!("K-quants take `k_quants::row`")
                }
            };
            acc[j] = (i as f32).mul_add(s, acc[j]);
            if format.has_min() {
                let m = f16::from_bits(w.mins[at]).to_f32();
                mn[j] = m.mul_add(x.sums[b], mn[j]);
            }
        }
    }
    if format.has_min() {
        std::array::from_fn(|j| acc[j] + mn[j])
    } else {
        acc
    }
}

/// A block's integer dot: weight `e` is `w(e)`.
fn dot(w: impl Fn(usize) -> i32, x: &[i8]) -> i32 {
    x.iter().enumerate().map(|(e, &x)| w(e) * x as i32).sum()
}
