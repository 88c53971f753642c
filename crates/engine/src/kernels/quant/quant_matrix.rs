//! [`QuantMatrix`]: the weights as the tiles read them, repacked from GGUF blocks (or
//! quantized from f32 to Q8_0) into interleaved groups (`group.rs`), and read back as
//! exact rows or as one weight group at a time. Its matmuls are in `matmul.rs`, the
//! K-quants' repacking in `k_quants.rs`: storage does not depend on how it is multiplied.

use super::group::{q4_get, q4_put, q5_get, q5_put, q8_at, Group};
use super::quantize_block::quantize_block;
use super::weight_format::WeightFormat;
use super::{BLOCK, NR, SUPER};
use crate::kernels::huge_buf::HugeBuf;
use half::f16;

/// Quantized weight matrix of `rows` (out_features) × `cols` (in_features).
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    pub(super) format: WeightFormat,
    pub(super) rows: usize,
    pub(super) cols: usize,
    /// `[group][block][row in group][quant_bytes]`; rows past `rows` are zero. Q5_0/Q5_1:
    /// per `[group][block]` the rows' nibbles, then their fifth bits (see `group`). K-quants:
    /// per `[group][block]` the rows' nibbles, then their high bits (see `k_quants`).
    pub(super) quants: HugeBuf<u8>,
    /// f16 bits, `[group][block][row in group]`; K-quants: `d` per super-block,
    /// `[group][super-block][row in group]`.
    pub(super) scales: HugeBuf<u16>,
    /// Q4_1's and Q5_1's f16 minimums, or Q4K/Q5K's `dmin`, laid out like `scales`; else empty.
    pub(super) mins: HugeBuf<u16>,
    /// K-quants' sub-block scales, `[group][block][2][row in group]`: Q4K/Q5K's 6-bit
    /// `sc` then `m`; Q6K's int8 scales of the block's first then second 16 elements.
    /// Empty for other formats.
    pub(super) sub: HugeBuf<u8>,
    /// Q8_0's per-row block sums `Σw`, laid out like `scales`: the biased VNNI tiles take
    /// `128·Σw` back without summing each block's weights again, a sum per block per row
    /// tile saved. Empty for other formats.
    pub(super) sums: HugeBuf<i16>,
}

impl QuantMatrix {
    /// Repacks a GGUF tensor's raw blocks (`n` rows of `k / 32` blocks each). `None` when
    /// `k` is not a multiple of 32 or `data` is not exactly that long.
    ///
    /// Q8_0 quants of −128 (which ggml's quantizer never writes) are read as −127: the SIMD
    /// dot products take `|x|` against `w` signed by `x`, and −128 has no positive twin.
    ///
    /// K-quants (Q4K, Q5K, Q6K) need `k` a multiple of 256, their super-block.
    pub fn from_ggml(format: WeightFormat, data: &[u8], n: usize, k: usize) -> Option<Self> {
        if format.is_k_quant() {
            return Self::from_ggml_k(format, data, n, k);
        }
        if !k.is_multiple_of(BLOCK) {
            return None;
        }
        let blocks = k / BLOCK;
        let bb = format.ggml_block_bytes();
        if n.checked_mul(blocks)?.checked_mul(bb)? != data.len() {
            return None;
        }
        let mut m = Self::zeroed(format, n, k);
        for row in 0..n {
            for b in 0..blocks {
                let src = &data[(row * blocks + b) * bb..][..bb];
                let at = m.slot(row, b);
                m.scales[at] = u16::from_le_bytes([src[0], src[1]]);
                if format.has_min() {
                    m.mins[at] = u16::from_le_bytes([src[2], src[3]]);
                }
                // After `d` (and `m`): Q5's `qh`, the fifth bit of element `e` at bit `e`
                // of a little-endian u32, then the nibble bytes as Q4's.
                let after = if format.has_min() { 4 } else { 2 };
                let (qh, qs) = if format.is_q5() {
                    let qh = u32::from_le_bytes([
                        src[after],
                        src[after + 1],
                        src[after + 2],
                        src[after + 3],
                    ]);
                    (qh, &src[after + 4..])
                } else {
                    (0, &src[after..])
                };
                let qb = format.quant_bytes();
                let j = row % NR;
                let span = &mut m.quants[(at - j) * qb..][..NR * qb];
                if format == WeightFormat::Q8_0 {
                    for (e, &q) in qs.iter().enumerate() {
                        span[q8_at(j, e)] = if q == 0x80 { (-127i8) as u8 } else { q };
                    }
                } else if format.is_q5() {
                    // As Q4's nibbles below, each with its bit of `qh` on top.
                    let high = |e: usize| ((qh >> e) & 1) as u8;
                    for (i, &byte) in qs.iter().enumerate() {
                        let hi = i + BLOCK / 2;
                        q5_put(span, j, i, byte & 0x0F | high(i) << 4);
                        q5_put(span, j, hi, byte >> 4 | high(hi) << 4);
                    }
                } else {
                    // GGUF's byte `i` holds elements `i` (low nibble) and `i + 16`.
                    for (i, &byte) in qs.iter().enumerate() {
                        q4_put(span, j, i, byte & 0x0F);
                        q4_put(span, j, i + BLOCK / 2, byte >> 4);
                    }
                }
            }
        }
        m.fill_sums();
        Some(m)
    }

    /// Quantizes row-major f32 weights `[n, k]` to Q8_0 as ggml does (f16 scale amax/127),
    /// for weights stored in a format without a native kernel. `None` as for `from_ggml`.
    pub fn quantize_q8_0(weights: &[f32], n: usize, k: usize) -> Option<Self> {
        if !k.is_multiple_of(BLOCK) || n.checked_mul(k)? != weights.len() {
            return None;
        }
        let mut m = Self::zeroed(WeightFormat::Q8_0, n, k);
        for (row, w) in weights.chunks_exact(k.max(1)).take(n).enumerate() {
            for (b, src) in w.chunks_exact(BLOCK).enumerate() {
                let at = m.slot(row, b);
                let mut q = [0i8; BLOCK];
                let d = quantize_block(src.try_into().ok()?, &mut q);
                m.scales[at] = f16::from_f32(d).to_bits();
                let j = row % NR;
                let span = &mut m.quants[(at - j) * BLOCK..][..NR * BLOCK];
                for (e, q) in q.into_iter().enumerate() {
                    span[q8_at(j, e)] = q as u8;
                }
            }
        }
        m.fill_sums();
        Some(m)
    }

    /// Q8_0's `sums` from its packed quants (other formats have none).
    fn fill_sums(&mut self) {
        if self.format != WeightFormat::Q8_0 {
            return;
        }
        for at in 0..self.sums.len() {
            let j = at % NR;
            let span = &self.quants[(at - j) * BLOCK..][..NR * BLOCK];
            self.sums[at] = (0..BLOCK).map(|e| span[q8_at(j, e)] as i8 as i16).sum();
        }
    }

    /// Two matrices of one shape and format as one whose weight groups alternate, `a`'s
    /// group `i` then `b`'s: a tile of `a` and the same columns' tile of `b` come out one
    /// after the other, so [`matmul_pairs_into`](Self::matmul_pairs_into) can combine them
    /// as they are stored (SwiGLU's gate and up). `None` when shapes or formats differ or
    /// the rows are not whole groups.
    pub fn interleave_pairs(a: &QuantMatrix, b: &QuantMatrix) -> Option<QuantMatrix> {
        let same = a.format == b.format && a.rows == b.rows && a.cols == b.cols;
        let gr = a.format.group_rows();
        if !same || a.rows == 0 || !a.rows.is_multiple_of(gr) {
            return None;
        }
        let groups = a.rows / gr;
        fn alternate<T: Copy>(a: &[T], b: &[T], groups: usize) -> Vec<T> {
            let per = a.len() / groups;
            a.chunks_exact(per.max(1))
                .zip(b.chunks_exact(per.max(1)))
                .flat_map(|(x, y)| x.iter().chain(y).copied())
                .collect()
        }
        Some(QuantMatrix {
            format: a.format,
            rows: 2 * a.rows,
            cols: a.cols,
            quants: alternate(&a.quants, &b.quants, groups).into(),
            scales: alternate(&a.scales, &b.scales, groups).into(),
            mins: alternate(&a.mins, &b.mins, groups).into(),
            sub: alternate(&a.sub, &b.sub, groups).into(),
            sums: alternate(&a.sums, &b.sums, groups).into(),
        })
    }

    pub(super) fn zeroed(format: WeightFormat, n: usize, k: usize) -> Self {
        let gr = format.group_rows();
        let slots = n.div_ceil(gr) * gr * (k / BLOCK);
        let supers = n.div_ceil(gr) * gr * (k / SUPER);
        let (scales, mins, sub) = match format {
            WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => (slots, 0, 0),
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => (slots, slots, 0),
            WeightFormat::Q4K | WeightFormat::Q5K => (supers, supers, 2 * slots),
            WeightFormat::Q6K => (supers, 0, 2 * slots),
        };
        Self {
            format,
            rows: n,
            cols: k,
            quants: HugeBuf::zeroed(slots * format.quant_bytes()),
            scales: HugeBuf::zeroed(scales),
            mins: HugeBuf::zeroed(mins),
            sub: HugeBuf::zeroed(sub),
            sums: HugeBuf::zeroed(if format == WeightFormat::Q8_0 {
                slots
            } else {
                0
            }),
        }
    }

    /// Index of (row, block) in the interleaved layout.
    pub(super) fn slot(&self, row: usize, block: usize) -> usize {
        let gr = self.format.group_rows();
        ((row / gr) * (self.cols / BLOCK) + block) * gr + row % gr
    }

    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// Output features (`n`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features (`k`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes a full pass over the weights reads (quants, scales, minimums, sub-scales).
    pub fn weight_bytes(&self) -> usize {
        self.quants.len() + 2 * (self.scales.len() + self.mins.len()) + self.sub.len()
    }

    /// Writes row `r`'s exact f32 values (`d·q`, `d·(q−8)`, `d·(q−16)` or `d·q + m`) into `out[k]`: the
    /// embedding lookup reads the quantized table this way instead of an f32 copy.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert!(r < self.rows && out.len() == self.cols);
        if self.format.is_k_quant() {
            return self.dequantize_row_k(r, out);
        }
        for (b, out) in out.chunks_exact_mut(BLOCK).enumerate() {
            let at = self.slot(r, b);
            let d = f16::from_bits(self.scales[at]).to_f32();
            let qb = self.format.quant_bytes();
            let j = r % NR;
            let span = &self.quants[(at - j) * qb..][..NR * qb];
            match self.format {
                WeightFormat::Q8_0 => {
                    for (e, o) in out.iter_mut().enumerate() {
                        *o = d * (span[q8_at(j, e)] as i8) as f32;
                    }
                }
                WeightFormat::Q4_0 => {
                    for (e, o) in out.iter_mut().enumerate() {
                        *o = d * (q4_get(span, j, e) as i32 - 8) as f32;
                    }
                }
                WeightFormat::Q4_1 => {
                    let m = f16::from_bits(self.mins[at]).to_f32();
                    for (e, o) in out.iter_mut().enumerate() {
                        *o = d * q4_get(span, j, e) as f32 + m;
                    }
                }
                WeightFormat::Q5_0 => {
                    for (e, o) in out.iter_mut().enumerate() {
                        *o = d * (q5_get(span, j, e) as i32 - 16) as f32;
                    }
                }
                WeightFormat::Q5_1 => {
                    let m = f16::from_bits(self.mins[at]).to_f32();
                    for (e, o) in out.iter_mut().enumerate() {
                        *o = d * q5_get(span, j, e) as f32 + m;
                    }
                }
                WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => unreachable!(),
            }
        }
    }

    #[inline]
    pub(super) fn group(&self, g: usize) -> Group<'_> {
        if self.format.is_k_quant() {
            return self.group_k(g);
        }
        let blocks = self.cols / BLOCK;
        let slots = g * blocks * NR..(g + 1) * blocks * NR;
        let qb = self.format.quant_bytes();
        Group {
            rows: NR,
            quants: &self.quants[slots.start * qb..slots.end * qb],
            scales: &self.scales[slots.clone()],
            mins: if self.mins.is_empty() {
                &[]
            } else {
                &self.mins[slots.clone()]
            },
            sub: &[],
            sums: if self.sums.is_empty() {
                &[]
            } else {
                &self.sums[slots]
            },
        }
    }
}
