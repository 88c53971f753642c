//! K-quants (Q4K, Q5K, Q6K): repacking GGUF super-blocks into the interleaved tiles, the
//! exact dequantization, and the portable kernel the SIMD paths must equal.
//!
//! A super-block of 256 becomes eight of our 32-blocks. Per 32-block the four rows' nibbles
//! are grouped by `q4_at` (four chunks of eight elements per row, two per half block) and the
//! sub-block scales kept as bytes; per super-block and row the f16 `d` (and `dmin`).
//! Nothing is widened to f32, so decode reads about the file's bits per weight: Q4K 4.625
//! (file 4.5: the 6-bit scales take a byte each), Q5K 5.625 (5.5), Q6K 6.5625 (the same).
//!
//! The high bits (Q5K: one, Q6K: two per element) follow the nibbles of the block's four
//! rows, laid out for the tile kernel: it holds a block as four 32-byte vectors `c` (the
//! block's chunk `c` of all four rows, `vector_byte`), byte `p` being position `p % 8` of
//! row `p / 8`'s chunk. Q6K keeps the top two bits of vector `c`'s byte `p` at bits
//! `2c..2c + 2` of byte `p` (32 bytes, one shift and mask per vector); Q5K keeps the fifth
//! bit of vector `c`'s byte `p` at bit `c + 4·(p / 16)` of byte `p % 16` (16 bytes: one
//! broadcast and a per-lane shift bring each 128-bit lane's bits down).

use super::activations::XRow;
use super::group::Group;
use super::quant_matrix::QuantMatrix;
use super::weight_format::WeightFormat;
use super::{BLOCK, K_NR as NR, SUB, SUPER};
use half::f16;

/// Nibble bytes of one block's four rows; the high bits follow.
const NIBBLES: usize = NR * BLOCK / 2;

/// One GGUF super-block unpacked: quants `q` (0..16, 0..32 or 0..64) and per 32-block
/// the two sub-scales as stored in `QuantMatrix::sub`.
struct SuperBlock {
    d: u16,
    dmin: u16,
    q: [u8; SUPER],
    sub: [[u8; 2]; SUB],
}

impl QuantMatrix {
    /// [`from_ggml`](Self::from_ggml) for K-quants: `n` rows of `k / 256` super-blocks.
    pub(super) fn from_ggml_k(
        format: WeightFormat,
        data: &[u8],
        n: usize,
        k: usize,
    ) -> Option<Self> {
        if !k.is_multiple_of(SUPER) {
            return None;
        }
        let (supers, bb, qb) = (k / SUPER, format.ggml_block_bytes(), format.quant_bytes());
        if n.checked_mul(supers)?.checked_mul(bb)? != data.len() {
            return None;
        }
        let mut m = Self::zeroed(format, n, k);
        for row in 0..n {
            let j = row % NR;
            for sb in 0..supers {
                let s = decode_super(format, &data[(row * supers + sb) * bb..][..bb]);
                let at = m.super_slot(row, sb);
                m.scales[at] = s.d;
                if format != WeightFormat::Q6K {
                    m.mins[at] = s.dmin;
                }
                for (i, sub) in s.sub.iter().enumerate() {
                    let base = m.slot(row, sb * SUB + i) - j;
                    m.sub[2 * base + j] = sub[0];
                    m.sub[2 * base + NR + j] = sub[1];
                    let span = &mut m.quants[base * qb..][..NR * qb];
                    for (e, &q) in s.q[i * BLOCK..][..BLOCK].iter().enumerate() {
                        put(format, span, j, e, q);
                    }
                }
            }
        }
        Some(m)
    }

    /// Index of (row, super-block) in `scales` and `mins`.
    fn super_slot(&self, row: usize, sb: usize) -> usize {
        ((row / NR) * (self.cols / SUPER) + sb) * NR + row % NR
    }

    /// The blocks of weight group `g` of a K-quant matrix.
    pub(super) fn group_k(&self, g: usize) -> Group<'_> {
        let (blocks, supers) = (self.cols / BLOCK, self.cols / SUPER);
        let slots = g * blocks * NR..(g + 1) * blocks * NR;
        let ss = g * supers * NR..(g + 1) * supers * NR;
        let qb = self.format.quant_bytes();
        Group {
            rows: NR,
            quants: &self.quants[slots.start * qb..slots.end * qb],
            scales: &self.scales[ss.clone()],
            mins: if self.mins.is_empty() {
                &[]
            } else {
                &self.mins[ss]
            },
            sub: &self.sub[2 * slots.start..2 * slots.end],
            sums: &[],
        }
    }

    /// [`dequantize_row`](Self::dequantize_row) for K-quants, as ggml (and candle) computes
    /// it: `(d·sc)·q − dmin·m`, or `(d·sc)·(q − 32)`; `d·sc` and `dmin·m` are exact in f32.
    pub(super) fn dequantize_row_k(&self, r: usize, out: &mut [f32]) {
        let (j, qb) = (r % NR, self.format.quant_bytes());
        for (b, out) in out.chunks_exact_mut(BLOCK).enumerate() {
            let base = self.slot(r, b) - j;
            let span = &self.quants[base * qb..][..NR * qb];
            let (sc0, sc1) = (self.sub[2 * base + j], self.sub[2 * base + NR + j]);
            let at = self.super_slot(r, b / SUB);
            let d = f16::from_bits(self.scales[at]).to_f32();
            for (e, o) in out.iter_mut().enumerate() {
                let q = get(self.format, span, j, e);
                *o = if self.format == WeightFormat::Q6K {
                    let sc = if e < BLOCK / 2 { sc0 } else { sc1 } as i8;
                    d * sc as f32 * (q as i32 - 32) as f32
                } else {
                    let dmin = f16::from_bits(self.mins[at]).to_f32();
                    d * sc0 as f32 * q as f32 - dmin * sc1 as f32
                };
            }
        }
    }
}

/// Where element `e` of row `j`'s nibble sits in a block's nibble bytes (`NR · 16`):
/// `(byte, shift)`. The block's 32 elements form four chunks of eight, chunk `c` being
/// elements `4c..4c+4` then `16+4c..16+4c+4`: the first four belong to the block's first
/// half, the last four to its second, as the per-half sums the tiles keep. Byte
/// `32h + 8j + p` holds position `p` of row `j`'s chunk `2h` (low nibble) and chunk `2h + 1`
/// (high): one 32-byte load, masked or shifted, is one chunk of all four rows, which meets
/// the same eight activations broadcast to every row.
fn q4_at(j: usize, e: usize) -> (usize, u32) {
    let (half, i) = (e / (BLOCK / 2), e % (BLOCK / 2));
    let (c, p) = (i / 4, i % 4 + 4 * half);
    (32 * (c / 2) + 8 * j + p, 4 * (c % 2) as u32)
}

/// Quant `e` of row `j` in one block's bytes (`NR · quant_bytes`), as laid out above.
pub(super) fn get(format: WeightFormat, span: &[u8], j: usize, e: usize) -> u8 {
    let (at, shift) = q4_at(j, e);
    let nibble = (span[at] >> shift) & 0x0F;
    let (c, p) = vector_byte(j, e);
    let high = match format {
        WeightFormat::Q5K => (span[NIBBLES + p % 16] >> (c + 4 * (p / 16))) & 1,
        WeightFormat::Q6K => (span[NIBBLES + p] >> (2 * c)) & 3,
        _ => 0,
    };
    nibble | high << 4
}

/// The tile kernel's vector `c` (a chunk of the block) and byte `p` holding element `e` of
/// row `j`: the nibbles' place (`q4_at`) seen after masking and shifting.
fn vector_byte(j: usize, e: usize) -> (usize, usize) {
    let (at, shift) = q4_at(j, e);
    (2 * (at / 32) + shift as usize / 4, at % 32)
}

/// Stores quant `e` of row `j` (the inverse of [`get`]); `span` starts zeroed.
fn put(format: WeightFormat, span: &mut [u8], j: usize, e: usize, q: u8) {
    let (at, shift) = q4_at(j, e);
    span[at] |= (q & 0x0F) << shift;
    let (c, p) = vector_byte(j, e);
    match format {
        WeightFormat::Q5K => span[NIBBLES + p % 16] |= (q >> 4 & 1) << (c + 4 * (p / 16)),
        WeightFormat::Q6K => span[NIBBLES + p] |= (q >> 4 & 3) << (2 * c),
        _ => {}
    }
}

/// Unpacks one GGUF super-block (ggml's `block_q4_K`, `block_q5_K`, `block_q6_K`).
fn decode_super(format: WeightFormat, src: &[u8]) -> SuperBlock {
    let f16_at = |i: usize| u16::from_le_bytes([src[i], src[i + 1]]);
    let mut s = SuperBlock {
        d: 0,
        dmin: 0,
        q: [0; SUPER],
        sub: [[0; 2]; SUB],
    };
    if format == WeightFormat::Q6K {
        // ql[128], qh[64], scales[16], d: per 128 elements, 64 ql bytes hold elements
        // l, l + 32 (low nibbles) and l + 64, l + 96 (high), 32 qh bytes all four's tops.
        let (ql, qh, sc) = (&src[..128], &src[128..192], &src[192..208]);
        s.d = f16_at(208);
        for (e, q) in s.q.iter_mut().enumerate() {
            let (half, quarter, l) = (e / 128, e % 128 / 32, e % 32);
            let nibble = (ql[64 * half + 32 * (quarter % 2) + l] >> (4 * (quarter / 2))) & 0x0F;
            *q = nibble | ((qh[32 * half + l] >> (2 * quarter)) & 3) << 4;
        }
        for (i, sub) in s.sub.iter_mut().enumerate() {
            *sub = [sc[2 * i], sc[2 * i + 1]];
        }
        return s;
    }
    // d, dmin, scales[12], (Q5K: qh[32]), qs[128]: per 64 elements, 32 qs bytes hold the
    // first 32 in low nibbles and the next 32 in high ones; qh bit `e / 32` of byte `e % 32`.
    s.d = f16_at(0);
    s.dmin = f16_at(2);
    let scales = &src[4..16];
    let (qh, qs) = match format {
        WeightFormat::Q5K => (&src[16..48], &src[48..176]),
        _ => (&src[..0], &src[16..144]),
    };
    for (e, q) in s.q.iter_mut().enumerate() {
        let nibble = (qs[32 * (e / 64) + e % 32] >> (4 * (e / 32 % 2))) & 0x0F;
        let high = qh.get(e % 32).map_or(0, |h| (h >> (e / 32)) & 1);
        *q = nibble | high << 4;
    }
    for (i, sub) in s.sub.iter_mut().enumerate() {
        *sub = scale_min(i, scales);
    }
    s
}

/// Sub-block `i`'s 6-bit scale and minimum from ggml's 12 packed bytes: the first four
/// pairs in the low 6 bits of bytes 0..8, the last four split into nibbles of bytes 8..12
/// plus the spare top 2 bits of bytes 0..8.
fn scale_min(i: usize, q: &[u8]) -> [u8; 2] {
    if i < 4 {
        [q[i] & 63, q[i + 4] & 63]
    } else {
        [
            (q[i + 4] & 0x0F) | (q[i - 4] >> 6) << 4,
            (q[i + 4] >> 4) | (q[i] >> 6) << 4,
        ]
    }
}

/// One activation row against one K-quant weight group, in the K-quants' per-element
/// sequence (module doc of `quant`).
pub(super) fn row(format: WeightFormat, w: Group, x: &XRow) -> [f32; NR] {
    let qb = format.quant_bytes();
    let mut acc = [0f32; NR];
    let mut mn = [0f32; NR];
    for b in 0..w.blocks() {
        let span = &w.quants[b * NR * qb..][..NR * qb];
        let xb = &x.quants[b * BLOCK..][..BLOCK];
        let sub = &w.sub[b * 2 * NR..][..2 * NR];
        for j in 0..NR {
            let dot = |e: std::ops::Range<usize>| -> i32 {
                e.map(|e| get(format, span, j, e) as i32 * xb[e] as i32)
                    .sum()
            };
            let at = (b / SUB) * NR + j;
            let d = f16::from_bits(w.scales[at]).to_f32();
            if format == WeightFormat::Q6K {
                let lo = dot(0..BLOCK / 2) + x.offsets[b][0];
                let hi = dot(BLOCK / 2..BLOCK) + x.offsets[b][1];
                let i = sub[j] as i8 as i32 * lo + sub[NR + j] as i8 as i32 * hi;
                acc[j] = (i as f32).mul_add(x.scales[b] * d, acc[j]);
            } else {
                let dw = d * sub[j] as f32;
                let mw = f16::from_bits(w.mins[at]).to_f32() * sub[NR + j] as f32;
                acc[j] = (dot(0..BLOCK) as f32).mul_add(x.scales[b] * dw, acc[j]);
                mn[j] = mw.mul_add(x.sums[b], mn[j]);
            }
        }
    }
    std::array::from_fn(|j| acc[j] - mn[j])
}
