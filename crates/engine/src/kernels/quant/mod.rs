//! `QuantMatrix`: GGUF-quantized weights (Q4_0, Q4_1, Q8_0, and the K-quants Q4K, Q5K,
//! Q6K) multiplied in their own bits by our batched, batch-invariant kernels, on every CPU
//! path bit for bit the same.
//!
//! Layout: weight rows are grouped by [`NR`] (K-quants by [`K_NR`]); a group's blocks are
//! interleaved (`[group][block][row in group]`), so one tile reads a group's block
//! contiguously. The quants are regrouped within a group's block (see [`q4_at`], [`q8_at`])
//! so that one 32-byte vector holds the same four elements of each of the eight rows: one
//! integer lane per weight row, a whole block's dot product in it (on AVX-512, one 64-byte
//! vector holds two groups' side by side). The f16 scales (and Q4_1 minimums) stay f16:
//! decode reads the file's bytes, not more.
//! Every buffer lives in [`HugeBuf`] chunks (huge pages), as decode streams them all each step.
//!
//! Activations are quantized per row to int8 blocks of 32 (scale = amax/127, round half away
//! from zero, as ggml's Q8_0/Q8_1). Each block's dot product `i` is an exact integer
//! (`|i| ≤ 32·127·127 < 2²⁴`, exact in f32). Per output element the float sequence is
//! fixed: in ascending block order `acc = fma(i, d_x·d_w, acc)` and, for Q4_1,
//! `mn = fma(m_w, d_x·Σx, mn)`; the result is `acc + mn`. The conversion, product and fma
//! per block and element are what bounds the tiles (they share the vector pipes with the
//! integer dots), so a block is never split into float partial sums: it once was, in
//! halves, and the tiles ran at 0.65–0.8× (measured; git history of docs/performance.md). Tiles
//! only change which elements are computed together, never that sequence, and `k` is never split
//! across threads, so a row's result is independent of the batch, and the SIMD paths equal
//! the portable one.
//!
//! K-quants (layout in `k_quants`) run per 32-block too, with their own sequence. Q4K/Q5K:
//! the block's whole integer dot `i` (q ∈ 0..16 or 0..32), `dw = d·sc` and `mw = dmin·m`
//! (both exact in f32), `acc = fma(i, d_x·dw, acc)` and `mn = fma(mw, d_x·Σx, mn)`; the
//! result is `acc − mn`. Q6K: per 16-element half the integer dot less `32·Σx`, times the
//! half's int8 scale, both added as integers (`|i| ≤ 2·128·16·32·127 < 2²⁴`, exact in f32),
//! then `acc = fma(i, d_x·d, acc)`; the result is `acc`.
//!
//! On AVX2 the integer dots are `maddubs` (u8 × i8 pairs into i16) summed over a block's
//! chunks in i16 while that cannot overflow (Q4_0/Q4_1: the whole block, sixteen products
//! of ≤ 15·127 per lane; K-quant nibbles eight, Q5K ≤ 31; Q6K four at a time; Q8_0 none,
//! as `|w| ≤ 127`), then widened by `madd`: exactly the integers VNNI's `vpdpbusd`
//! accumulates.

mod k_quants;

use super::huge_buf::HugeBuf;
use crate::kernels::compute_pool::{ComputePool, Shards};
use crate::kernels::cpu_kernel::CpuKernel;
use half::f16;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Range;

/// Elements per quantization block (one scale each).
pub const BLOCK: usize = 32;
/// Elements per K-quant super-block (one f16 `d`, and `dmin`, each).
pub const SUPER: usize = 256;
/// 32-blocks per K-quant super-block.
const SUB: usize = SUPER / BLOCK;
/// Weight rows (output columns) per Q4_0/Q4_1/Q8_0 group and tile; the weights are stored
/// interleaved by this, one 32-bit lane per row in a 256-bit vector.
pub const NR: usize = 8;
/// Weight rows per K-quant group and tile (their lanes hold half blocks: two per row).
pub const K_NR: usize = 4;
/// Activation rows per tile at most (the AVX-512 tiles'; the 256-bit ones take [`MR_256`]).
pub const MR: usize = 8;
/// Activation rows per tile of the portable and 256-bit kernels: their registers hold no more.
const MR_256: usize = 4;

/// Below this many multiply-adds, a rayon fork costs more than it saves.
const MIN_PARALLEL_MACS: usize = 1 << 18;
/// Weight bytes per parallel task at most, so a task's weights stay in L2 while every
/// activation tile streams past them.
const TASK_WEIGHT_BYTES: usize = 192 * 1024;
/// Activation elements above which quantizing them is split across threads.
const MIN_PARALLEL_QUANTIZE: usize = 1 << 16;

/// A GGUF block format our kernels run natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// `d · (q − 8)`, q ∈ 0..16.
    Q4_0,
    /// `d · q + m`, q ∈ 0..16.
    Q4_1,
    /// `d · q`, q ∈ −127..=127.
    Q8_0,
    /// Super-blocks of 256 (f16 `d`, `dmin`) holding eight 32-blocks with 6-bit `sc`, `m`:
    /// `d·sc · q − dmin·m`, q ∈ 0..16.
    Q4K,
    /// As [`Q4K`](Self::Q4K) with a fifth bit: q ∈ 0..32.
    Q5K,
    /// Super-blocks of 256 (f16 `d`) holding sixteen 16-blocks with int8 `sc`:
    /// `d·sc · (q − 32)`, q ∈ 0..64.
    Q6K,
}

impl WeightFormat {
    /// Bytes of one GGUF block ([`ggml_block_elems`](Self::ggml_block_elems) elements).
    pub fn ggml_block_bytes(self) -> usize {
        match self {
            WeightFormat::Q4_0 => 18,
            WeightFormat::Q4_1 => 20,
            WeightFormat::Q8_0 => 34,
            WeightFormat::Q4K => 144,
            WeightFormat::Q5K => 176,
            WeightFormat::Q6K => 210,
        }
    }

    /// Elements of one GGUF block: 32, or a K-quant's super-block of 256.
    pub fn ggml_block_elems(self) -> usize {
        if self.is_k_quant() {
            SUPER
        } else {
            BLOCK
        }
    }

    /// A K-quant: scales per super-block of 256 and sub-scales per 32 (or 16) elements.
    pub fn is_k_quant(self) -> bool {
        matches!(
            self,
            WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K
        )
    }

    /// Weight rows per stored group (and tile): [`K_NR`] for K-quants, else [`NR`].
    fn group_rows(self) -> usize {
        if self.is_k_quant() {
            K_NR
        } else {
            NR
        }
    }

    /// Quant bytes of one row's block as stored here (scales kept apart): the nibbles,
    /// plus a K-quant's high bits (one or two per element).
    fn quant_bytes(self) -> usize {
        match self {
            WeightFormat::Q4_0 | WeightFormat::Q4_1 | WeightFormat::Q4K => BLOCK / 2,
            WeightFormat::Q5K => BLOCK / 2 + BLOCK / 8,
            WeightFormat::Q6K => BLOCK / 2 + BLOCK / 4,
            WeightFormat::Q8_0 => BLOCK,
        }
    }
}

/// Quantized weight matrix of `rows` (out_features) × `cols` (in_features).
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    format: WeightFormat,
    rows: usize,
    cols: usize,
    /// `[group][block][row in group][quant_bytes]`; rows past `rows` are zero. K-quants:
    /// per `[group][block]` the rows' nibbles, then their high bits (see `k_quants`).
    quants: HugeBuf<u8>,
    /// f16 bits, `[group][block][row in group]`; K-quants: `d` per super-block,
    /// `[group][super-block][row in group]`.
    scales: HugeBuf<u16>,
    /// Q4_1's f16 minimums, or Q4K/Q5K's `dmin`, laid out like `scales`; else empty.
    mins: HugeBuf<u16>,
    /// K-quants' sub-block scales, `[group][block][2][row in group]`: Q4K/Q5K's 6-bit
    /// `sc` then `m`; Q6K's int8 scales of the block's first then second 16 elements.
    /// Empty for other formats.
    sub: HugeBuf<u8>,
    /// Q8_0's per-row block sums `Σw`, laid out like `scales`: the biased VNNI tiles take
    /// `128·Σw` back without summing each block's weights again (the Q8_0 tile 1.2–1.3× in
    /// most rounds at 16–256 rows). Empty for other formats.
    sums: HugeBuf<i16>,
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
                let qs = match format {
                    WeightFormat::Q4_1 => {
                        m.mins[at] = u16::from_le_bytes([src[2], src[3]]);
                        &src[4..]
                    }
                    _ => &src[2..],
                };
                let qb = format.quant_bytes();
                let j = row % NR;
                let span = &mut m.quants[(at - j) * qb..][..NR * qb];
                if format == WeightFormat::Q8_0 {
                    for (e, &q) in qs.iter().enumerate() {
                        span[q8_at(j, e)] = if q == 0x80 { (-127i8) as u8 } else { q };
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

    fn zeroed(format: WeightFormat, n: usize, k: usize) -> Self {
        let gr = format.group_rows();
        let slots = n.div_ceil(gr) * gr * (k / BLOCK);
        let supers = n.div_ceil(gr) * gr * (k / SUPER);
        let (scales, mins, sub) = match format {
            WeightFormat::Q4_0 | WeightFormat::Q8_0 => (slots, 0, 0),
            WeightFormat::Q4_1 => (slots, slots, 0),
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
    fn slot(&self, row: usize, block: usize) -> usize {
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

    /// Writes row `r`'s exact f32 values (`d·q`, `d·(q−8)` or `d·q + m`) into `out[k]`: the
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
                WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => unreachable!(),
            }
        }
    }

    /// `y[m, n] = x[m, k] · Wᵀ`, allocating the result. See [`matmul_into`](Self::matmul_into).
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let mut y = vec![0f32; m * self.rows];
        self.matmul_into(x, m, &mut y);
        y
    }

    /// `y[m, n] = x[m, k] · Wᵀ` on the process's [`CpuKernel::active`] path. Row `r` of the
    /// result is bitwise independent of `m`, of the other rows, and of the path.
    ///
    /// # Panics
    /// If `x` is not `[m, k]` or `y` not `[m, n]`.
    pub fn matmul_into(&self, x: &[f32], m: usize, y: &mut [f32]) {
        self.matmul_with(x, m, y, CpuKernel::active())
    }

    /// `y[m, n] += x[m, k] · Wᵀ`: the residual add done as the tiles are stored.
    ///
    /// # Panics
    /// As [`matmul_into`](Self::matmul_into).
    pub fn matmul_add_into(
        &self,
        x: &[f32],
        m: usize,
        y: &mut [f32],
        act: &mut QuantizedActivations,
    ) {
        let mut outs = [y];
        let out = OutputWriter::new(&mut outs, m, self.rows, true);
        self.run(x.into(), m, &out, CpuKernel::active(), act);
    }

    /// The result's columns written to several matrices side by side (stacked Q/K/V or
    /// gate/up), `outs[i]` being `[m, width_i]` with `Σ width_i = n`, so no split copy
    /// follows. `x` may carry a norm its rows go through first ([`Input`]).
    ///
    /// # Panics
    /// If the widths do not add up to `n`, or `x` is not `[m, k]`.
    pub fn matmul_split_into<'a>(
        &self,
        x: impl Into<Input<'a>>,
        m: usize,
        outs: &mut [&mut [f32]],
        act: &mut QuantizedActivations,
    ) {
        let out = OutputWriter::new(outs, m, self.rows, false);
        self.run(x.into(), m, &out, CpuKernel::active(), act);
    }

    /// On a matrix from [`interleave_pairs`](Self::interleave_pairs): `out[m, n / 2]` holds
    /// `combine(a, b)` of `a`'s and `b`'s results, element by element, computed as the
    /// tiles are stored (`combine` gets one row's run of up to 64 columns per call), so
    /// `a`'s and `b`'s results never reach memory. Each tile is the one `a`'s
    /// (or `b`'s) own matmul computes, so this equals combining their outputs afterwards.
    ///
    /// # Panics
    /// If `x` is not `[m, k]` or `out` not `[m, n / 2]`.
    pub fn matmul_pairs_into<'a>(
        &self,
        x: impl Into<Input<'a>>,
        m: usize,
        out: &mut [f32],
        act: &mut QuantizedActivations,
        combine: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
    ) {
        let gr = self.format.group_rows();
        assert!(self.rows.is_multiple_of(2 * gr), "not a matrix of pairs");
        assert_eq!(out.len(), m * self.rows / 2, "the output is not [m, n / 2]");
        let sink = PairWriter {
            out: out.as_mut_ptr(),
            width: self.rows / 2,
            m,
            combine,
            _out: PhantomData,
        };
        self.run(x.into(), m, &sink, CpuKernel::active(), act);
    }

    /// [`matmul_into`](Self::matmul_into) on a chosen path, so tests and benchmarks can
    /// compare every path this CPU runs.
    ///
    /// # Panics
    /// If the CPU cannot run `kernel`, or the shapes are wrong.
    pub fn matmul_with(&self, x: &[f32], m: usize, y: &mut [f32], kernel: CpuKernel) {
        let mut outs = [y];
        let out = OutputWriter::new(&mut outs, m, self.rows, false);
        ACT_SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut act) => self.run(x.into(), m, &out, kernel, &mut act),
            Err(_) => self.run(
                x.into(),
                m,
                &out,
                kernel,
                &mut QuantizedActivations::default(),
            ),
        });
    }

    fn run(
        &self,
        x: Input,
        m: usize,
        out: &impl TileSink,
        kernel: CpuKernel,
        act: &mut QuantizedActivations,
    ) {
        assert!(
            kernel.is_supported(),
            "this CPU cannot run the {kernel} kernel"
        );
        assert_eq!(
            x.x.len(),
            m * self.cols,
            "QuantMatrix::matmul: x is not [m, k]"
        );
        if m == 0 || self.rows == 0 {
            return;
        }
        let n = self.rows;
        act.quantize(x, m, self.cols, self.format, kernel);
        let act = &*act;
        let task_cols = self.task_cols(m, out.groups_per_step());
        let run = |t: usize| {
            let cols = t * task_cols..((t + 1) * task_cols).min(n);
            // SAFETY: task `t` alone writes columns `cols`; tasks partition `0..n`.
            unsafe { self.task(act, cols, out, kernel) }
        };
        let tasks = n.div_ceil(task_cols);
        if m * n * self.cols < MIN_PARALLEL_MACS {
            (0..tasks).for_each(run);
        } else {
            ComputePool::global().run(tasks, &run);
        }
    }

    /// Output columns per parallel task: a multiple of `step` groups whose weights fit in L2,
    /// one task a thread for a single activation row and several (balance) for more.
    fn task_cols(&self, m: usize, step: usize) -> usize {
        let threads = ComputePool::global().threads();
        let gr = self.format.group_rows();
        let groups = self.rows.div_ceil(gr);
        let group_bytes = (self.cols * gr * self.format.quant_bytes() / BLOCK).max(1);
        let per_cache = (TASK_WEIGHT_BYTES / group_bytes).max(1);
        // One activation row streams its weights once, with nothing to reuse: one task a
        // thread (as far as the cache allows) ran SmolLM2's one-row step in 2.25–2.26 ms
        // where four took 2.53–2.58 (measured; git history of docs/performance.md): fewer tasks
        // start fewer weight streams and take fewer claims. Larger batches want several tasks
        // a thread for balance, each at least two groups wide to amortize re-reading the
        // activations.
        let want = if m == 1 {
            groups.div_ceil(threads)
        } else {
            groups.div_ceil(threads * 4).max(2)
        };
        // Whole pairs of groups, so the AVX-512 tiles leave no group to the narrower one.
        let unit = if step.is_multiple_of(2) {
            step
        } else {
            2 * step
        };
        want.min(per_cache).max(1).next_multiple_of(unit) * gr
    }

    /// The blocks of weight group `g`.
    #[inline]
    fn group(&self, g: usize) -> Group<'_> {
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

    /// Computes output columns `cols` (starting at a whole group) for every row.
    ///
    /// # Safety
    /// No other thread may access columns `cols` of `out` meanwhile.
    unsafe fn task(
        &self,
        act: &QuantizedActivations,
        cols: Range<usize>,
        out: &impl TileSink,
        kernel: CpuKernel,
    ) {
        let rows = tile_rows(self.format, kernel);
        for i0 in (0..act.m).step_by(rows) {
            let mr = (act.m - i0).min(rows);
            // Rows past `mr` repeat the last one; the kernels ignore them.
            let x: [XRow; MR] = std::array::from_fn(|i| act.row(i0 + i.min(mr - 1)));
            // SAFETY: these columns belong to this task (caller's contract).
            let gr = self.format.group_rows();
            let mut emit = unsafe { out.emitter(i0, mr, cols.end, gr) };
            let groups = cols.start / gr..cols.end.div_ceil(gr);
            // The first row tile brings the task's weights from memory; the later ones find
            // them in cache (`task_cols` sizes a task for L2).
            let rows = Rows {
                x: &x,
                mr,
                first: i0 == 0,
            };
            tiles(self, kernel, groups, rows, &mut emit);
        }
    }
}

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
fn q4_get(span: &[u8], j: usize, e: usize) -> u8 {
    let (at, shift) = q4_at(j, e);
    (span[at] >> shift) & 0x0F
}

/// Stores nibble `q` of element `e` of row `j` (the inverse of [`q4_get`]); `span` starts
/// zeroed.
fn q4_put(span: &mut [u8], j: usize, e: usize, q: u8) {
    let (at, shift) = q4_at(j, e);
    span[at] |= (q & 0x0F) << shift;
}

/// Where element `e` of row `j` sits in a Q8_0 group's block (`NR · 32` bytes): chunks as
/// [`q4_at`]'s, chunk `c` of all eight rows being bytes `32c..32c + 32`, row `j`'s four at
/// `32c + 4j`.
fn q8_at(j: usize, e: usize) -> usize {
    32 * (e / 4) + 4 * j + e % 4
}

/// One weight group's blocks, as the tile kernels read them.
#[derive(Clone, Copy)]
struct Group<'a> {
    /// Weight rows in the group: [`NR`], or [`K_NR`] for K-quants.
    rows: usize,
    quants: &'a [u8],
    scales: &'a [u16],
    mins: &'a [u16],
    /// K-quants' sub-block scales; empty otherwise.
    sub: &'a [u8],
    /// Q8_0's per-row block sums; empty otherwise.
    sums: &'a [i16],
}

impl Group<'_> {
    fn blocks(&self) -> usize {
        if self.sub.is_empty() {
            self.scales.len() / self.rows
        } else {
            self.sub.len() / (2 * self.rows)
        }
    }

    /// Whether every buffer of this group starts where `prev`'s ends: consecutive groups of
    /// one matrix, which the 512-bit pair tiles' prefetch relies on.
    #[cfg(target_arch = "x86_64")]
    fn follows(&self, prev: &Group) -> bool {
        fn after<T>(prev: &[T], next: &[T]) -> bool {
            prev.as_ptr_range().end == next.as_ptr()
        }
        after(prev.quants, self.quants)
            && after(prev.scales, self.scales)
            && after(prev.mins, self.mins)
            && after(prev.sums, self.sums)
    }
}

thread_local! {
    /// The calling thread's quantized activations, for the convenience entry points
    /// (`matmul`, `matmul_into`, `matmul_with`); the forward pass lends its own.
    static ACT_SCRATCH: RefCell<QuantizedActivations> = RefCell::new(QuantizedActivations::default());
}

/// A matmul's activation rows `x` (`[m, k]`), and a norm each row goes through first when
/// given: RMSNorm fused into the quantization, so the normalized rows never reach memory
/// and the norm takes no parallel loop of its own. Each row is normalized exactly as the
/// norm alone would, so the same quantized bits.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    pub x: &'a [f32],
    pub norm: Option<&'a dyn RowNorm>,
}

impl<'a> From<&'a [f32]> for Input<'a> {
    fn from(x: &'a [f32]) -> Self {
        Self { x, norm: None }
    }
}

impl<'a> From<&'a Vec<f32>> for Input<'a> {
    fn from(x: &'a Vec<f32>) -> Self {
        Self { x, norm: None }
    }
}

/// A per-row transform of activations (RMSNorm), applied as they are quantized.
pub trait RowNorm: Sync {
    /// `dst = norm(src)`, both one row wide.
    fn norm_into(&self, src: &[f32], dst: &mut [f32]);
}

thread_local! {
    /// One normalized row on its way to quantization ([`Input::norm`]).
    static NORMED_ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The half-block sums of the rows a task quantizes ([`quantize_row`]).
    static HALF_SUMS: RefCell<Vec<[i32; 2]>> = const { RefCell::new(Vec::new()) };
}

/// Activations quantized per row: `quants[m][k]`, per-block `scales[m][k / 32]`, and what
/// each weight format needs besides. A forward pass owns one and lends it to every matmul,
/// so its buffers grow once and are reused.
#[derive(Default)]
pub struct QuantizedActivations {
    m: usize,
    k: usize,
    quants: Vec<i8>,
    /// The quants as a format's tiles broadcast them. K-quants: per block its four chunks
    /// of eight (chunk `c`: quants `4c..4c+4` then `16+4c..16+4c+4`, as `k_quants` groups
    /// the weights). Q8_0: each quant plus 128, as u8 bits (VNNI multiplies u8 by i8; the
    /// weights stay signed and the tile takes `128·Σw` back); filled only on VNNI paths
    /// for two or more rows, the tiles that read it. Q4_0, Q4_1: unused.
    copy: Vec<i8>,
    scales: Vec<f32>,
    /// Q4_0: `[−8 · Σ quants, 0]` per block (its offset of 8); Q6K: `−32 · Σ` over each
    /// block's first and second halves. Negated, so a VNNI kernel can start its dot
    /// product from it.
    offsets: Vec<[i32; 2]>,
    /// `d_x · Σ quants` per block (Q4_1's and Q4K/Q5K's minimum term).
    sums: Vec<f32>,
}

/// One quantized activation row, as the tile kernels read it.
#[derive(Clone, Copy)]
struct XRow<'a> {
    quants: &'a [i8],
    copy: &'a [i8],
    scales: &'a [f32],
    offsets: &'a [[i32; 2]],
    sums: &'a [f32],
}

impl QuantizedActivations {
    fn quantize(&mut self, x: Input, m: usize, k: usize, format: WeightFormat, kernel: CpuKernel) {
        let Input { x, norm } = x;
        let blocks = k / BLOCK;
        self.m = m;
        self.k = k;
        self.quants.resize(m * k, 0);
        self.copy.resize(m * k, 0);
        self.scales.resize(m * blocks, 0.0);
        // Q4_0 and Q6K subtract their offset per half block; Q4_1, Q4K and Q5K add a
        // minimum term per block; Q8_0 needs neither.
        let (offsets, sums) = match format {
            WeightFormat::Q8_0 => (0, 0),
            WeightFormat::Q4_0 | WeightFormat::Q6K => (m * blocks, 0),
            WeightFormat::Q4_1 | WeightFormat::Q4K | WeightFormat::Q5K => (0, m * blocks),
        };
        self.offsets.resize(offsets, [0; 2]);
        self.sums.resize(sums, 0.0);
        // Only VNNI tiles of two or more rows read Q8_0's biased copy.
        let biased = m > 1 && matches!(kernel, CpuKernel::AvxVnni | CpuKernel::Avx512Vnni);
        let (quants, scales) = (Shards::new(&mut self.quants), Shards::new(&mut self.scales));
        let copies = Shards::new(&mut self.copy);
        let (offsets, sums) = (Shards::new(&mut self.offsets), Shards::new(&mut self.sums));
        // Each row whole, its block offsets or sums from the half sums the quantizer took
        // while each block was in registers.
        let rows = |rows: Range<usize>| {
            let (at, b) = (
                rows.start * k..rows.end * k,
                rows.start * blocks..rows.end * blocks,
            );
            // SAFETY: each call takes the disjoint ranges of its own rows.
            let (q, d, c) = unsafe {
                (
                    quants.range(at.clone()),
                    scales.range(b.clone()),
                    copies.range(at.clone()),
                )
            };
            // The formats with an offset or a minimum term (those buffers sized above) need
            // each block's sum of quants (Q6K per half).
            let wants_sums = !offsets.is_empty() || !sums.is_empty();
            HALF_SUMS.with_borrow_mut(|halves| {
                halves.resize(if wants_sums { b.len() } else { 0 }, [0; 2]);
                match norm {
                    None => quantize_row(&x[at], q, d, halves, kernel),
                    // Each row normalized into a buffer that stays in L1, then quantized.
                    Some(norm) => NORMED_ROW.with_borrow_mut(|row| {
                        row.resize(k, 0.0);
                        let rows = x[at].chunks_exact(k).zip(q.chunks_exact_mut(k));
                        let mut h = halves.chunks_mut(blocks);
                        for ((src, q), d) in rows.zip(d.chunks_exact_mut(blocks)) {
                            norm.norm_into(src, row);
                            quantize_row(row, q, d, h.next().unwrap_or_default(), kernel);
                        }
                    }),
                }
                match format {
                    WeightFormat::Q4_0 | WeightFormat::Q4_1 => {}
                    WeightFormat::Q8_0 if !biased => {}
                    WeightFormat::Q8_0 => {
                        for (c, &q) in c.iter_mut().zip(q.iter()) {
                            *c = (q as u8 ^ 0x80) as i8;
                        }
                    }
                    _ => q
                        .chunks_exact(k)
                        .zip(c.chunks_exact_mut(k))
                        .for_each(|(q, c)| arrange_chunks(q, c)),
                }
                if !offsets.is_empty() {
                    // SAFETY: as above.
                    let o = unsafe { offsets.range(b.clone()) };
                    for (o, &[lo, hi]) in o.iter_mut().zip(halves.iter()) {
                        *o = if format == WeightFormat::Q6K {
                            [-32 * lo, -32 * hi]
                        } else {
                            [-8 * (lo + hi), 0]
                        };
                    }
                }
                if !sums.is_empty() {
                    // SAFETY: as above.
                    let o = unsafe { sums.range(b) };
                    for ((o, &[lo, hi]), d) in o.iter_mut().zip(halves.iter()).zip(d.iter()) {
                        *o = d * (lo + hi) as f32;
                    }
                }
            });
        };
        // Every per-row step runs on the pool when the batch is large enough to pay for it.
        if m * k >= MIN_PARALLEL_QUANTIZE {
            let min = (MIN_PARALLEL_QUANTIZE / (4 * k)).max(1);
            ComputePool::global().for_each_range(m, min, rows);
        } else {
            rows(0..m);
        }
    }

    fn row(&self, r: usize) -> XRow<'_> {
        let (k, b) = (self.k, self.k / BLOCK);
        XRow {
            quants: &self.quants[r * k..(r + 1) * k],
            copy: &self.copy[r * k..(r + 1) * k],
            scales: &self.scales[r * b..(r + 1) * b],
            offsets: part(&self.offsets, r * b..(r + 1) * b),
            sums: part(&self.sums, r * b..(r + 1) * b),
        }
    }
}

/// Each block's four chunks of eight (chunk `c`: quants `4c..4c+4` then `16+4c..16+4c+4`,
/// as `k_quants` groups the weights), so a K-quant tile broadcasts a chunk with one load.
fn arrange_chunks(quants: &[i8], chunks: &mut [i8]) {
    let h = BLOCK / 2;
    for (b, out) in quants
        .chunks_exact(BLOCK)
        .zip(chunks.chunks_exact_mut(BLOCK))
    {
        for c in 0..4 {
            out[8 * c..8 * c + 4].copy_from_slice(&b[4 * c..4 * c + 4]);
            out[8 * c + 4..8 * c + 8].copy_from_slice(&b[h + 4 * c..h + 4 * c + 4]);
        }
    }
}

/// `v[at]`, or nothing when the format did not fill `v`.
fn part<T>(v: &[T], at: Range<usize>) -> &[T] {
    if v.is_empty() {
        &[]
    } else {
        &v[at]
    }
}

/// `Σ v`, in sixteen lanes so the compiler vectorises it (as one running sum it stayed
/// scalar, byte by byte: 1.3% of a 2,048-token Qwen3-0.6B prefill). Integer sums are exact
/// in any order.
fn sum_i8(v: &[i8]) -> i32 {
    let mut lanes = [0i32; 16];
    let mut chunks = v.chunks_exact(16);
    for c in &mut chunks {
        for (l, &q) in lanes.iter_mut().zip(c) {
            *l += q as i32;
        }
    }
    let tail: i32 = chunks.remainder().iter().map(|&q| q as i32).sum();
    lanes.iter().sum::<i32>() + tail
}

/// Quantizes `src` block by block into `dst` and `scales`; when `halves` is not empty
/// (one entry per block), also each block's sums of quants over its first and second
/// sixteen.
fn quantize_row(
    src: &[f32],
    dst: &mut [i8],
    scales: &mut [f32],
    halves: &mut [[i32; 2]],
    kernel: CpuKernel,
) {
    assert!(halves.is_empty() || halves.len() == scales.len().min(src.len() / BLOCK));
    // Other targets quantize on the portable path whatever the matmul kernel.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernel;
    #[cfg(target_arch = "x86_64")]
    if kernel != CpuKernel::Portable {
        // SAFETY: every SIMD path requires AVX2, checked by `matmul_with`; AVX-512 is
        // `Avx512Vnni`'s.
        unsafe {
            if kernel == CpuKernel::Avx512Vnni {
                x86::quantize_row_avx512(src, dst, scales, halves)
            } else {
                x86::quantize_row(src, dst, scales, halves)
            }
        };
        return;
    }
    for ((src, dst), d) in src
        .chunks_exact(BLOCK)
        .zip(dst.chunks_exact_mut(BLOCK))
        .zip(scales)
    {
        if let (Ok(src), Ok(dst)) = (src.try_into(), dst.try_into()) {
            *d = quantize_block(src, dst);
        }
    }
    for (h, q) in halves.iter_mut().zip(dst.chunks_exact(BLOCK)) {
        let (lo, hi) = q.split_at(BLOCK / 2);
        *h = [sum_i8(lo), sum_i8(hi)];
    }
}

/// Where a matmul's tiles go as parallel tasks finish them, each task owning whole groups
/// `cols` of the result.
trait TileSink: Sync {
    /// Weight groups a task's range is a multiple of (a pair sink needs both halves).
    fn groups_per_step(&self) -> usize;

    /// The writer of activation rows `i0..i0 + mr`'s tiles in one task's columns (ending
    /// at `cols_end`), handed every group (of `gr` weight rows) of them in ascending order.
    ///
    /// # Safety
    /// No other thread may access those rows' elements of the task's columns meanwhile.
    unsafe fn emitter(
        &self,
        i0: usize,
        mr: usize,
        cols_end: usize,
        gr: usize,
    ) -> impl FnMut(usize, &Tile);
}

impl TileSink for OutputWriter<'_> {
    fn groups_per_step(&self) -> usize {
        1
    }

    unsafe fn emitter(
        &self,
        i0: usize,
        mr: usize,
        cols_end: usize,
        gr: usize,
    ) -> impl FnMut(usize, &Tile) {
        move |g, tile| {
            let c = g * gr;
            let width = (cols_end - c).min(gr);
            // SAFETY: the columns are the task's (the caller's contract).
            unsafe { self.write_tile(i0, c, &tile[..mr], width) };
        }
    }
}

/// The `[m, n / 2]` output of [`QuantMatrix::matmul_pairs_into`]: even groups' tiles (`a`)
/// and odd groups' (`b`) are gathered side by side, then combined a run of columns at a time.
struct PairWriter<'a, F> {
    out: *mut f32,
    width: usize,
    m: usize,
    combine: F,
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: tasks write disjoint columns (`emitter`'s contract).
unsafe impl<F: Sync> Sync for PairWriter<'_, F> {}

impl<F> TileSink for PairWriter<'_, F>
where
    F: Fn(&[f32], &[f32], &mut [f32]) + Sync,
{
    fn groups_per_step(&self) -> usize {
        2
    }

    unsafe fn emitter(
        &self,
        i0: usize,
        mr: usize,
        cols_end: usize,
        gr: usize,
    ) -> impl FnMut(usize, &Tile) {
        assert!(i0 + mr <= self.m);
        // The task's last group (a `b` group: tasks hold whole pairs).
        let last = cols_end.div_ceil(gr) - 1;
        let (mut a, mut b) = ([[0f32; PAIR_RUN]; MR], [[0f32; PAIR_RUN]; MR]);
        let (mut col, mut filled) = (0, 0);
        move |g, tile| {
            // Gather a run of pairs, then combine each row's run in one call, so `combine`
            // runs over whole vectors even for one activation row.
            let half = if g.is_multiple_of(2) { &mut a } else { &mut b };
            for (dst, src) in half.iter_mut().zip(tile).take(mr) {
                dst[filled..filled + gr].copy_from_slice(&src[..gr]);
            }
            if g.is_multiple_of(2) {
                if filled == 0 {
                    col = (g / 2) * gr;
                }
                return;
            }
            filled += gr;
            if filled < PAIR_RUN && g < last {
                return;
            }
            for (i, (a, b)) in a.iter().zip(&b).take(mr).enumerate() {
                // SAFETY: columns `col..col + filled` are this task's pairs, inside the
                // `[m, width]` output, and `i0 + i < m`; exclusive by the caller's contract.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        self.out.add((i0 + i) * self.width + col),
                        filled,
                    )
                };
                (self.combine)(&a[..filled], &b[..filled], dst);
            }
            filled = 0;
        }
    }
}

/// Output columns of pairs gathered before they are combined: eight 8-lane vectors a row.
const PAIR_RUN: usize = 64;

/// Most matrices one matmul writes side by side (Q, K and V).
const MAX_OUTPUTS: usize = 4;

/// The `[m, n]` result as parallel tasks store it, each owning a disjoint column range, so
/// no task needs a private buffer copied into place later. Its columns may go to several
/// row-major matrices (`[m, width_i]`), and may be added to what is there.
struct OutputWriter<'a> {
    /// `(first column, width, base pointer)` per output matrix, in column order.
    segments: [(usize, usize, *mut f32); MAX_OUTPUTS],
    count: usize,
    m: usize,
    add: bool,
    /// Holds the mutable borrows of the outputs, so nothing else can touch them meanwhile.
    _out: PhantomData<&'a mut [f32]>,
}

// SAFETY: `write`'s contract makes concurrent writers touch disjoint elements.
unsafe impl Sync for OutputWriter<'_> {}

impl<'a> OutputWriter<'a> {
    fn new(outs: &'a mut [&mut [f32]], m: usize, n: usize, add: bool) -> Self {
        assert!(outs.len() <= MAX_OUTPUTS, "at most {MAX_OUTPUTS} outputs");
        let mut segments = [(0, 0, std::ptr::null_mut()); MAX_OUTPUTS];
        let mut first = 0;
        for (seg, out) in segments.iter_mut().zip(outs.iter_mut()) {
            let width = out.len().checked_div(m).unwrap_or(0);
            assert_eq!(out.len(), m * width, "an output is not [m, width]");
            *seg = (first, width, out.as_mut_ptr());
            first += width;
        }
        assert!(
            m == 0 || first == n,
            "output widths add up to {first}, not {n}"
        );
        Self {
            segments,
            count: outs.len(),
            m,
            add,
            _out: PhantomData,
        }
    }

    /// Stores (or adds) the first `width` columns of each of `rows` at
    /// `[row0 + i, col..col + width]`. Finds the output once for the whole tile when its
    /// columns lie in one (always, for outputs whose widths are multiples of [`NR`]).
    ///
    /// # Safety
    /// No other thread may access those elements concurrently.
    #[inline]
    unsafe fn write_tile(&self, row0: usize, col: usize, rows: &[[f32; NR]], width: usize) {
        let seg = self.segments[..self.count]
            .iter()
            .find(|&&(first, w, _)| col >= first && col + width <= first + w);
        let Some(&(first, w, ptr)) = seg else {
            for (i, row) in rows.iter().enumerate() {
                // SAFETY: the caller's contract.
                unsafe { self.write(row0 + i, col, &row[..width]) };
            }
            return;
        };
        assert!(row0 + rows.len() <= self.m);
        for (i, row) in rows.iter().enumerate() {
            // SAFETY: `col - first + width <= w` and `row0 + i < m`, so in bounds of this
            // `[m, w]` output; exclusive by the caller's contract.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(ptr.add((row0 + i) * w + col - first), width)
            };
            // A whole group's width is a constant, so the copy is two moves, not a memcpy call.
            match (self.add, <&mut [f32; NR]>::try_from(&mut *dst)) {
                (false, Ok(full)) => *full = *row,
                (true, Ok(full)) => full.iter_mut().zip(row).for_each(|(d, v)| *d += v),
                (false, Err(_)) => dst.copy_from_slice(&row[..width]),
                (true, Err(_)) => dst.iter_mut().zip(row).for_each(|(d, v)| *d += v),
            }
        }
    }

    /// Stores (or adds) `vals` at `[row, col..col + vals.len()]` of the whole result.
    ///
    /// # Safety
    /// No other thread may access those elements concurrently.
    unsafe fn write(&self, row: usize, col: usize, vals: &[f32]) {
        assert!(row < self.m);
        let (mut col, mut vals) = (col, vals);
        for &(first, width, ptr) in &self.segments[..self.count] {
            if vals.is_empty() {
                break;
            }
            if col >= first + width {
                continue;
            }
            let take = vals.len().min(first + width - col);
            // SAFETY: `col - first + take <= width` and `row < m`, so in bounds of this
            // `[m, width]` output; exclusive by the caller's contract.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(ptr.add(row * width + col - first), take);
                if self.add {
                    dst.iter_mut().zip(&vals[..take]).for_each(|(d, v)| *d += v);
                } else {
                    dst.copy_from_slice(&vals[..take]);
                }
            }
            col += take;
            vals = &vals[take..];
        }
        assert!(vals.is_empty(), "columns past the result's width");
    }
}

/// Quantizes one 32-element block into `dst` and returns its scale (amax/127). Rounds
/// half away from zero, like C's `roundf`.
fn quantize_block(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> f32 {
    let amax = src.iter().fold(0f32, |a, v| a.max(v.abs()));
    let (d, id) = scale_and_inverse(amax);
    for (q, v) in dst.iter_mut().zip(src) {
        // −128 is excluded: it would let maddubs pairs saturate i16.
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    d
}

/// The block scale and the multiplier that maps the block onto [−127, 127].
fn scale_and_inverse(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    // A block below ~3.7e-37 has no finite inverse: it quantizes to zeros. (An infinite
    // one made `±0 · ∞` NaN, which the scalar rounding and the vector clamps turned into
    // different bytes.)
    let id = 1.0 / d;
    (d, if id.is_finite() { id } else { 0.0 })
}

/// One tile's result: `[activation row][weight row in group]`.
type Tile = [[f32; NR]; MR];

/// Activation rows per tile of `format` on `kernel`.
fn tile_rows(format: WeightFormat, kernel: CpuKernel) -> usize {
    #[cfg(target_arch = "x86_64")]
    let wide = x86::has_zmm_tile(format, kernel);
    #[cfg(not(target_arch = "x86_64"))]
    let wide = {
        let _ = (format, kernel);
        false
    };
    if wide {
        MR
    } else {
        MR_256
    }
}

/// One tile's activation rows: `x[..mr]` (the rest repeat the last), and whether they are
/// the first a task runs, whose tiles read its weights from memory.
#[derive(Clone, Copy)]
struct Rows<'r, 'a> {
    x: &'r [XRow<'a>; MR],
    mr: usize,
    // Only the x86 512-bit tiles tell first row tiles apart.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    first: bool,
}

/// Multiplies the activation rows by each weight group of `groups` on the chosen path.
fn tiles(
    m: &QuantMatrix,
    kernel: CpuKernel,
    groups: Range<usize>,
    rows: Rows,
    emit: &mut impl FnMut(usize, &Tile),
) {
    let (format, x, mr) = (m.format, rows.x, rows.mr);
    match kernel {
        // SAFETY: `matmul_with` checked the CPU supports `kernel`.
        #[cfg(target_arch = "x86_64")]
        CpuKernel::Avx2 | CpuKernel::AvxVnni | CpuKernel::Avx512Vnni => unsafe {
            x86::tiles(m, kernel, groups, rows, emit)
        },
        // SAFETY: as above. K-quants have no NEON tile yet and take the portable rows.
        #[cfg(target_arch = "aarch64")]
        CpuKernel::NeonDotprod if !format.is_k_quant() => unsafe {
            neon::tiles(m, groups, x, mr, emit)
        },
        _ => {
            for g in groups {
                let w = m.group(g);
                let mut out = [[0f32; NR]; MR];
                for (o, row) in out.iter_mut().zip(x).take(mr) {
                    if format.is_k_quant() {
                        o[..K_NR].copy_from_slice(&k_quants::row(format, w, row));
                    } else {
                        *o = portable::row(format, w, row);
                    }
                }
                emit(g, &out);
            }
        }
    }
}

mod portable {
    use super::{f16, q4_get, q8_at, Group, WeightFormat, XRow, BLOCK, NR};

    /// One activation row against one weight group, in the shared per-element sequence.
    pub(super) fn row(format: WeightFormat, w: Group, x: &XRow) -> [f32; NR] {
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
                    WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => {
                        unreachable!("K-quants take `k_quants::row`")
                    }
                };
                acc[j] = (i as f32).mul_add(s, acc[j]);
                if format == WeightFormat::Q4_1 {
                    let m = f16::from_bits(w.mins[at]).to_f32();
                    mn[j] = m.mul_add(x.sums[b], mn[j]);
                }
            }
        }
        if format == WeightFormat::Q4_1 {
            std::array::from_fn(|j| acc[j] + mn[j])
        } else {
            acc
        }
    }

    /// A block's integer dot: weight `e` is `w(e)`.
    fn dot(w: impl Fn(usize) -> i32, x: &[i8]) -> i32 {
        x.iter().enumerate().map(|(e, &x)| w(e) * x as i32).sum()
    }
}

/// Checks every read of the activation rows a tile of `blocks` blocks makes is in
/// bounds, so the loops can use raw loads. Once per run of groups.
fn check_rows<const R: usize>(x: &[XRow; MR], blocks: usize, format: WeightFormat) {
    for row in &x[..R] {
        assert!(row.quants.len() >= blocks * BLOCK && row.scales.len() >= blocks);
        match format {
            WeightFormat::Q8_0 => assert!(row.copy.len() >= blocks * BLOCK),
            WeightFormat::Q4_0 => assert!(row.offsets.len() >= blocks),
            WeightFormat::Q4_1 => assert!(row.sums.len() >= blocks),
            WeightFormat::Q6K => {
                assert!(row.offsets.len() >= blocks && row.copy.len() >= blocks * BLOCK)
            }
            WeightFormat::Q4K | WeightFormat::Q5K => {
                assert!(row.sums.len() >= blocks && row.copy.len() >= blocks * BLOCK)
            }
        }
    }
}

/// Checks every read of one weight group is in bounds, for the `blocks` its rows were
/// checked for.
#[inline(always)]
fn check_group(w: &Group, blocks: usize, format: WeightFormat) {
    let gr = format.group_rows();
    assert!(w.rows == gr && w.blocks() == blocks);
    assert!(w.quants.len() >= blocks * gr * format.quant_bytes());
    assert!(format != WeightFormat::Q4_1 || w.mins.len() >= blocks * gr);
    assert!(format != WeightFormat::Q8_0 || w.sums.len() >= blocks * gr);
    if format.is_k_quant() {
        let supers = blocks.div_ceil(SUB) * gr;
        assert!(w.sub.len() >= 2 * blocks * gr && w.scales.len() >= supers);
        assert!(format == WeightFormat::Q6K || w.mins.len() >= supers);
    }
}

#[cfg(target_arch = "aarch64")]
mod neon;

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The SIMD paths. One tile body per format, stamped out per instruction set by
    //! `simd_path!`; only the integer dot of four adjacent u8×i8 products differs.
    use super::{
        check_group, check_rows, scale_and_inverse, CpuKernel, Group, QuantMatrix, Rows, Tile,
        WeightFormat, XRow, BLOCK, K_NR, MR, MR_256, NR, SUB,
    };
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Every group of `groups` against the activation rows, each tile handed to `emit`. One
    /// dispatch and one bounds check of the rows per run of groups, not per tile: at one
    /// activation row a tile is only a few hundred instructions.
    ///
    /// # Safety
    /// The CPU must support `kernel` (and so AVX2, FMA and F16C).
    pub(super) unsafe fn tiles(
        m: &QuantMatrix,
        kernel: CpuKernel,
        groups: Range<usize>,
        rows: Rows,
        emit: &mut impl FnMut(usize, &Tile),
    ) {
        let (x, mr, first) = (rows.x, rows.mr, rows.first);
        macro_rules! by_rows {
            ($path:ident) => {
                match mr {
                    1 => $path::tiles::<1>(m, groups, x, emit),
                    2 => $path::tiles::<2>(m, groups, x, emit),
                    3 => $path::tiles::<3>(m, groups, x, emit),
                    _ => $path::tiles::<4>(m, groups, x, emit),
                }
            };
        }
        // SAFETY: the caller guarantees the CPU supports `kernel`.
        unsafe {
            match kernel {
                // A lone activation row keeps the 256-bit tile: decode is memory-bound, and
                // two groups' streams at once ran it 1.2–1.7× slower, prefetched or not
                // (measured; git history of docs/performance.md).
                // K-quant pair tiles from five rows up: at four their per-block setup of
                // two groups outweighed the wider dot (Q5K at 4 rows 0.8–0.9×).
                CpuKernel::Avx512Vnni
                    if has_zmm_tile(m.format, kernel)
                        && mr > if m.format.is_k_quant() { MR_256 } else { 1 } =>
                {
                    match mr {
                        2 => zmm::tiles::<2>(m, groups, x, first, emit),
                        3 => zmm::tiles::<3>(m, groups, x, first, emit),
                        4 => zmm::tiles::<4>(m, groups, x, first, emit),
                        5 => zmm::tiles::<5>(m, groups, x, first, emit),
                        6 => zmm::tiles::<6>(m, groups, x, first, emit),
                        7 => zmm::tiles::<7>(m, groups, x, first, emit),
                        _ => zmm::tiles::<8>(m, groups, x, first, emit),
                    }
                }
                CpuKernel::Avx512Vnni => by_rows!(avx512_vnni),
                CpuKernel::AvxVnni => by_rows!(avx_vnni),
                _ => by_rows!(avx2),
            }
        }
    }

    /// Blocks ahead of the one being read that the tiles prefetch (2 KiB of a Q4 group).
    /// Decode streams each weight once; the hardware prefetcher alone left one-row tiles
    /// (and the 512-bit tiles' two streams at any height) waiting on memory
    /// (measured; git history of docs/performance.md).
    const AHEAD: usize = 32;

    /// Prefetches the quants [`AHEAD`] blocks past the block of `block_bytes` at `p`. Past
    /// the group's end the addresses run into the next group's, which the task reads next;
    /// past the matrix they point nowhere, harmless as a prefetch never faults (wrapping
    /// arithmetic, as the address may leave the allocation).
    #[inline(always)]
    fn prefetch_quants(p: *const u8, block_bytes: usize) {
        prefetch_lines(
            p.wrapping_add(AHEAD * block_bytes) as *const i8,
            block_bytes,
        );
    }

    /// Prefetches the cache line of `values` (`per_block` of them per block: scales,
    /// minimums, sub-scales) [`AHEAD`] blocks past block `k`, once per line.
    #[inline(always)]
    fn prefetch_per_block<T>(values: &[T], per_block: usize, k: usize) {
        if !values.is_empty() && starts_line(per_block * size_of::<T>(), k) {
            let p = values.as_ptr().wrapping_add((k + AHEAD) * per_block);
            prefetch_lines(p as *const i8, 1);
        }
    }

    /// Prefetches every cache line of the `bytes` at `p` (wrapping arithmetic: the address
    /// may leave the allocation).
    #[inline(always)]
    fn prefetch_lines(p: *const i8, bytes: usize) {
        for line in (0..bytes).step_by(64) {
            // SAFETY: a prefetch reads nothing architecturally and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line)) };
        }
    }

    /// Whether block `k` of values `bytes` a block long is where a new cache line's worth
    /// starts: smaller per-block values are prefetched once per line, not once per block.
    #[inline(always)]
    fn starts_line(bytes: usize, k: usize) -> bool {
        k.is_multiple_of((64 / bytes).max(1))
    }

    /// Whether `format` has 512-bit tiles on `kernel` (of [`MR`] activation rows).
    pub(super) fn has_zmm_tile(format: WeightFormat, kernel: CpuKernel) -> bool {
        kernel == CpuKernel::Avx512Vnni
            && matches!(
                format,
                WeightFormat::Q8_0
                    | WeightFormat::Q4_0
                    | WeightFormat::Q4_1
                    | WeightFormat::Q4K
                    | WeightFormat::Q5K
                    | WeightFormat::Q6K
            )
    }

    /// [`super::quantize_row`] on AVX2: the block loop inside the target feature, so each
    /// block's code is inlined rather than called.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_row(
        src: &[f32],
        dst: &mut [i8],
        scales: &mut [f32],
        halves: &mut [[i32; 2]],
    ) {
        // SAFETY: the CPU has AVX2 (this function's contract).
        quantize_blocks(src, dst, scales, halves, |s, d| unsafe {
            quantize_block(s, d)
        })
    }

    /// [`quantize_row`] on 512-bit registers: a block is two of them.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL (and AVX2).
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_row_avx512(
        src: &[f32],
        dst: &mut [i8],
        scales: &mut [f32],
        halves: &mut [[i32; 2]],
    ) {
        // SAFETY: the CPU has the features (this function's contract).
        quantize_blocks(src, dst, scales, halves, |s, d| unsafe {
            quantize_block_avx512(s, d)
        })
    }

    /// The block loop of both row quantizers, `block` quantizing one block and returning
    /// its scale and quants; inlined into each caller's target features.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn quantize_blocks(
        src: &[f32],
        dst: &mut [i8],
        scales: &mut [f32],
        halves: &mut [[i32; 2]],
        block: impl Fn(&[f32; BLOCK], &mut [i8; BLOCK]) -> (f32, __m256i),
    ) {
        let blocks = src
            .chunks_exact(BLOCK)
            .zip(dst.chunks_exact_mut(BLOCK))
            .zip(scales);
        for (b, ((s, d), sc)) in blocks.enumerate() {
            if let (Ok(s), Ok(d)) = (s.try_into(), d.try_into()) {
                let (scale, bytes) = block(s, d);
                *sc = scale;
                if let Some(h) = halves.get_mut(b) {
                    // SAFETY: the CPU has AVX2 (this function's contract).
                    *h = unsafe { half_sums(bytes) };
                }
            }
        }
    }

    /// A block's 32 quants in order: the sums of the first and the last sixteen. `psadbw`
    /// sums unsigned bytes, so each quant is biased by 128 first and the bias taken back.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn half_sums(bytes: __m256i) -> [i32; 2] {
        let u = _mm256_xor_si256(bytes, _mm256_set1_epi8(i8::MIN));
        // Four sums of eight bytes each, in 64-bit lanes.
        let s = _mm256_sad_epu8(u, _mm256_setzero_si256());
        let pair = |x: __m128i| _mm_cvtsi128_si32(_mm_add_epi64(x, _mm_unpackhi_epi64(x, x)));
        let bias = 16 * 128;
        [
            pair(_mm256_castsi256_si128(s)) - bias,
            pair(_mm256_extracti128_si256::<1>(s)) - bias,
        ]
    }

    /// [`quantize_block`] on two 512-bit registers, bit for bit; also returns the quants.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW/VL (and AVX2).
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn quantize_block_avx512(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> (f32, __m256i) {
        let p = src.as_ptr();
        // SAFETY: `src` holds 32 f32s, two unaligned 16-wide loads.
        let v = unsafe { [_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))] };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
        let (d, id) = scale_and_inverse(amax);
        let id = _mm512_set1_ps(id);
        let bytes = _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm512_cvtsepi32_epi8(to_i32_avx512(v[0], id))),
            _mm512_cvtsepi32_epi8(to_i32_avx512(v[1], id)),
        );
        // SAFETY: `dst` is 32 bytes; storeu has no alignment requirement.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, bytes) };
        (d, bytes)
    }

    /// [`to_i32`] on sixteen lanes, step for step: truncate, step away from zero where the
    /// dropped fraction is ≥ 0.5, clamp, convert.
    #[inline]
    #[target_feature(enable = "avx2,avx512f")]
    fn to_i32_avx512(v: __m512, id: __m512) -> __m512i {
        let y = _mm512_mul_ps(v, id);
        let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
        let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(
            _mm512_abs_ps(_mm512_sub_ps(y, t)),
            _mm512_set1_ps(0.5),
        );
        let sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(i32::MIN));
        let unit = _mm512_or_si512(sign, _mm512_castps_si512(_mm512_set1_ps(1.0)));
        let r = _mm512_mask_add_ps(t, away, t, _mm512_castsi512_ps(unit));
        let r = _mm512_min_ps(
            _mm512_max_ps(r, _mm512_set1_ps(-127.0)),
            _mm512_set1_ps(127.0),
        );
        _mm512_cvttps_epi32(r)
    }

    /// Vectorized [`super::quantize_block`], bit for bit: `f32::round` is a libm call on
    /// baseline x86-64, which would cost more than the matmul for small `n`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn quantize_block(src: &[f32; BLOCK], dst: &mut [i8; BLOCK]) -> (f32, __m256i) {
        let p = src.as_ptr();
        // SAFETY: `src` holds 32 f32s, four unaligned 8-wide loads.
        let v = unsafe {
            [
                _mm256_loadu_ps(p),
                _mm256_loadu_ps(p.add(8)),
                _mm256_loadu_ps(p.add(16)),
                _mm256_loadu_ps(p.add(24)),
            ]
        };
        let m = _mm256_max_ps(
            _mm256_max_ps(abs(v[0]), abs(v[1])),
            _mm256_max_ps(abs(v[2]), abs(v[3])),
        );
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps::<1>(m2, m2)));
        let (d, id) = scale_and_inverse(amax);
        let id = _mm256_set1_ps(id);
        let q = [
            to_i32(v[0], id),
            to_i32(v[1], id),
            to_i32(v[2], id),
            to_i32(v[3], id),
        ];
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        // The packs work within 128-bit lanes; this puts the 4-byte groups back in order.
        let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: `dst` is 32 bytes; storeu has no alignment requirement.
        unsafe { _mm256_storeu_si256(dst.as_mut_ptr() as *mut __m256i, ordered) };
        (d, ordered)
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    fn abs(v: __m256) -> __m256 {
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
    }

    /// `round(v * id)` clamped to [−127, 127], half away from zero like `f32::round`:
    /// truncate, then step away from zero when the (exact) dropped fraction is ≥ 0.5.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn to_i32(v: __m256, id: __m256) -> __m256i {
        let y = _mm256_mul_ps(v, id);
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
        let away = _mm256_cmp_ps::<_CMP_GE_OQ>(abs(_mm256_sub_ps(y, t)), _mm256_set1_ps(0.5));
        let unit = _mm256_or_ps(_mm256_and_ps(y, _mm256_set1_ps(-0.0)), _mm256_set1_ps(1.0));
        let r = _mm256_add_ps(t, _mm256_and_ps(away, unit));
        let r = _mm256_min_ps(
            _mm256_max_ps(r, _mm256_set1_ps(-127.0)),
            _mm256_set1_ps(127.0),
        );
        _mm256_cvttps_epi32(r)
    }

    /// `acc` plus eight i32 sums of four adjacent u8×i8 products (lane `l` covers bytes
    /// `4l..4l+4`). With the unsigned side ≤ 127 (|w|) or ≤ 15 (nibbles) the i16 pair sums
    /// of maddubs cannot saturate, so this equals the exact VNNI result; the biased u8
    /// activations (≤ 255) are for VNNI only.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn dp_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_add_epi32(
            acc,
            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)),
        )
    }

    #[inline]
    #[target_feature(enable = "avx2,avxvnni")]
    fn dp_avx_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, u, s)
    }

    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn dp_avx512_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }

    /// Chunks of four elements in a 32-block: one per 32-bit lane of a dot product.
    const CHUNKS: usize = BLOCK / 4;

    /// Chunk `c` of the block at `p`: its four bytes as one i32, to broadcast to every lane.
    ///
    /// # Safety
    /// `p` must point at a readable block of 32 bytes and `c < CHUNKS`.
    #[inline(always)]
    unsafe fn chunk_bits(p: *const i8, c: usize) -> i32 {
        // SAFETY: the caller's contract; an unaligned 4-byte read.
        unsafe { std::ptr::read_unaligned(p.add(4 * c) as *const i32) }
    }

    /// [`chunk_bits`] broadcast to a 256-bit vector.
    ///
    /// # Safety
    /// As [`chunk_bits`].
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunk_of(p: *const i8, c: usize) -> __m256i {
        // SAFETY: the caller's contract.
        _mm256_set1_epi32(unsafe { chunk_bits(p, c) })
    }

    /// Eight f16 values (a group's block scales or minimums) as f32.
    ///
    /// # Safety
    /// `p` must point at eight readable u16s.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn f16x8(p: *const u16) -> __m256 {
        // SAFETY: the caller's contract; an unaligned 16-byte read.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p as *const __m128i) })
    }

    /// The tile of the 256-bit Q4/Q8 kernels: lane `j` of row `r`'s accumulator is weight
    /// row `j`, plus Q4_1's minimum term.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn tile_of<const R: usize>(acc: &[__m256; R], mn: Option<&[__m256; R]>) -> Tile {
        let mut out = [[0f32; NR]; MR];
        for r in 0..R {
            let row = match mn {
                Some(mn) => _mm256_add_ps(acc[r], mn[r]),
                None => acc[r],
            };
            // SAFETY: a row is 8 f32s; storeu has no alignment requirement.
            unsafe { _mm256_storeu_ps(out[r].as_mut_ptr(), row) };
        }
        out
    }

    /// Eight i32 sums, over four chunks, of four adjacent u8×i8 products (lane `l` covers
    /// bytes `4l..4l+4` of every chunk). For nibbles (≤ 15) an i16 lane of the four
    /// chunks' `maddubs` sums eight products, |Σ| ≤ 8·15·127 < 2¹⁵, so one widening `madd`
    /// ends it, exactly as VNNI's accumulation.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn chunk4_avx2(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
        let (a, b) = chunk_pairs_avx2(w, x);
        _mm256_madd_epi16(_mm256_add_epi16(a, b), _mm256_set1_epi16(1))
    }

    /// The i16 `maddubs` sums of chunks 0 + 1 and of chunks 2 + 3.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn chunk_pairs_avx2(w: [__m256i; 4], x: [__m256i; 4]) -> (__m256i, __m256i) {
        let m: [__m256i; 4] = [
            _mm256_maddubs_epi16(w[0], x[0]),
            _mm256_maddubs_epi16(w[1], x[1]),
            _mm256_maddubs_epi16(w[2], x[2]),
            _mm256_maddubs_epi16(w[3], x[3]),
        ];
        (_mm256_add_epi16(m[0], m[1]), _mm256_add_epi16(m[2], m[3]))
    }

    #[inline]
    #[target_feature(enable = "avx2,avxvnni")]
    fn chunk4_avx_vnni(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
        let acc = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), w[0], x[0]);
        let acc = _mm256_dpbusd_avx_epi32(acc, w[1], x[1]);
        let acc = _mm256_dpbusd_avx_epi32(acc, w[2], x[2]);
        _mm256_dpbusd_avx_epi32(acc, w[3], x[3])
    }

    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn chunk4_avx512_vnni(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
        let acc = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w[0], x[0]);
        let acc = _mm256_dpbusd_epi32(acc, w[1], x[1]);
        let acc = _mm256_dpbusd_epi32(acc, w[2], x[2]);
        _mm256_dpbusd_epi32(acc, w[3], x[3])
    }

    /// [`chunk4_avx2`] for 6-bit quants (Q6K, ≤ 63): two chunks' `maddubs` per i16 lane
    /// (four products, |Σ| ≤ 4·63·127 < 2¹⁵) before each widening `madd`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn chunk4w_avx2(w: [__m256i; 4], x: [__m256i; 4]) -> __m256i {
        let ones = _mm256_set1_epi16(1);
        let (a, b) = chunk_pairs_avx2(w, x);
        _mm256_add_epi32(_mm256_madd_epi16(a, ones), _mm256_madd_epi16(b, ones))
    }

    /// One activation block's four chunks of eight, each broadcast to every row's place.
    ///
    /// # Safety
    /// `p` must point at 32 readable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn chunks_of(p: *const i8) -> [__m256i; 4] {
        let p = p as *const i64;
        // SAFETY: the caller's contract; unaligned 8-byte reads.
        unsafe {
            [
                _mm256_set1_epi64x(std::ptr::read_unaligned(p)),
                _mm256_set1_epi64x(std::ptr::read_unaligned(p.add(1))),
                _mm256_set1_epi64x(std::ptr::read_unaligned(p.add(2))),
                _mm256_set1_epi64x(std::ptr::read_unaligned(p.add(3))),
            ]
        }
    }

    /// A K-quant block's four 32-byte vectors, chunks 0..4 of the four rows (eight
    /// elements each, as `k_quants` splits a block), each byte a whole quant: the nibble plus
    /// `EXTRA` high bits (0: Q4K, 1: Q5K, 2: Q6K) from where `k_quants` lays them out.
    ///
    /// # Safety
    /// `p` must point at one block's `K_NR · quant_bytes` readable bytes.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn k_quants<const EXTRA: usize>(p: *const u8) -> [__m256i; 4] {
        let nib = _mm256_set1_epi8(0x0F);
        // SAFETY (all loads): the caller's contract; 64 nibble bytes, then the high bits.
        let (r01, r23) = unsafe {
            let wp = p as *const __m256i;
            (_mm256_loadu_si256(wp), _mm256_loadu_si256(wp.add(1)))
        };
        let q = [
            _mm256_and_si256(r01, nib),
            _mm256_and_si256(_mm256_srli_epi16::<4>(r01), nib),
            _mm256_and_si256(r23, nib),
            _mm256_and_si256(_mm256_srli_epi16::<4>(r23), nib),
        ];
        // The epi16 shifts below move at most 4 bits, and the masks keep one byte's own
        // bits, so nothing leaks between bytes.
        let h = match EXTRA {
            1 => {
                // Byte p's bit c (lane 0) or c + 4 (lane 1) is vector c's fifth bit; shift
                // lane 1 down 4, then bit c up to bit 4.
                let h = _mm256_broadcastsi128_si256(unsafe {
                    _mm_loadu_si128(p.add(K_NR * BLOCK / 2) as *const __m128i)
                });
                let h = _mm256_srlv_epi32(h, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
                let bit = _mm256_set1_epi8(0x10);
                [
                    _mm256_and_si256(_mm256_slli_epi16::<4>(h), bit),
                    _mm256_and_si256(_mm256_slli_epi16::<3>(h), bit),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(h), bit),
                    _mm256_and_si256(_mm256_slli_epi16::<1>(h), bit),
                ]
            }
            2 => {
                // Byte p's bits 2c..2c+2 are vector c's top two bits, moved to bits 4..6.
                let h = unsafe { _mm256_loadu_si256(p.add(K_NR * BLOCK / 2) as *const __m256i) };
                let top = _mm256_set1_epi8(0x30);
                [
                    _mm256_and_si256(_mm256_slli_epi16::<4>(h), top),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(h), top),
                    _mm256_and_si256(h, top),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(h), top),
                ]
            }
            _ => return q,
        };
        std::array::from_fn(|c| _mm256_or_si256(q[c], h[c]))
    }

    /// Four f16 values (a group's super-block scales) as f32.
    ///
    /// # Safety
    /// `p` must point at four readable u16s.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn f16x4(p: *const u16) -> __m128 {
        // SAFETY: the caller's contract; loadl reads 8 bytes unaligned.
        _mm_cvtph_ps(unsafe { _mm_loadl_epi64(p as *const __m128i) })
    }

    /// The whole block's integer per weight row from the half sums
    /// `[r0lo r0hi r1lo r1hi | r2lo r2hi r3lo r3hi]`: each pair added, twice over.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn pair_sums(halves: __m256i) -> __m256i {
        _mm256_add_epi32(halves, _mm256_shuffle_epi32::<0b10_11_00_01>(halves))
    }

    /// The K-quant tiles' result: row j's lane of `acc` (lane `2j` after `pair_sums`)
    /// minus its minimum term.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn finish_k(acc: __m256, mn: __m128) -> [f32; K_NR] {
        let (mut lanes, mut m) = ([0f32; 8], [0f32; K_NR]);
        // SAFETY: `lanes` is 8 f32s and `m` 4; storeu has no alignment requirement.
        unsafe {
            _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
            _mm_storeu_ps(m.as_mut_ptr(), mn);
        }
        std::array::from_fn(|j| lanes[2 * j] - m[j])
    }

    macro_rules! simd_path {
        ($name:ident, $features:literal, $vnni:expr, $dp:ident, $chunk4:ident, $chunk4w:ident) => {
            pub(super) mod $name {
                use super::*;

                /// Every group of `groups` against `R` activation rows, each tile handed
                /// to `emit`.
                ///
                /// # Safety
                /// The CPU must support the path's features.
                #[target_feature(enable = $features)]
                pub(in super::super) unsafe fn tiles<const R: usize>(
                    m: &QuantMatrix,
                    groups: Range<usize>,
                    x: &[XRow; MR],
                    emit: &mut impl FnMut(usize, &Tile),
                ) {
                    let (format, blocks) = (m.format, m.cols / BLOCK);
                    check_rows::<R>(x, blocks, format);
                    // SAFETY: the CPU supports this path (caller's contract); the rows were
                    // checked for `blocks` blocks, and each kernel checks its group.
                    unsafe {
                        for g in groups {
                            let w = m.group(g);
                            let tile = match format {
                                WeightFormat::Q8_0 => q8_0::<R>(w, x, blocks),
                                WeightFormat::Q4_0 => q4::<R, false>(w, x, blocks),
                                WeightFormat::Q4_1 => q4::<R, true>(w, x, blocks),
                                WeightFormat::Q4K => q4k::<R, false>(w, x, blocks),
                                WeightFormat::Q5K => q4k::<R, true>(w, x, blocks),
                                WeightFormat::Q6K => q6k::<R>(w, x, blocks),
                            };
                            emit(g, &tile);
                        }
                    }
                }

                /// `R` activation rows against one Q8_0 weight group, one weight row per
                /// lane, each lane a whole block's integer dot. With VNNI and several rows
                /// the activations come biased to u8 (`x + 128`) against the signed
                /// weights, and the tile takes `128·Σw` back (`Σw` kept per row and block
                /// since load, [`QuantMatrix::sums`]); otherwise `|w|` meets the activations signed
                /// by `w`, which costs fewer instructions for one row (decode's output
                /// layer: 0.83–0.90× the speed biased).
                ///
                /// # Safety
                /// The CPU must support the path's features.
                #[inline]
                #[target_feature(enable = $features)]
                pub(in super::super) unsafe fn q8_0<const R: usize>(
                    w: Group,
                    x: &[XRow; MR],
                    blocks: usize,
                ) -> Tile {
                    check_group(&w, blocks, WeightFormat::Q8_0);
                    let mut acc = [_mm256_setzero_ps(); R];
                    for b in 0..blocks {
                        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                        unsafe {
                            let wp = w.quants.as_ptr().add(b * NR * BLOCK) as *const __m256i;
                            prefetch_quants(wp as *const u8, NR * BLOCK);
                            prefetch_per_block(w.scales, NR, b);
                            let wv: [__m256i; CHUNKS] =
                                std::array::from_fn(|c| _mm256_loadu_si256(wp.add(c)));
                            let dw = f16x8(w.scales.as_ptr().add(b * NR));
                            let mut h = [_mm256_setzero_si256(); R];
                            if $vnni && R > 1 {
                                let sw = _mm256_cvtepi16_epi32(_mm_loadu_si128(
                                    w.sums.as_ptr().add(b * NR) as *const __m128i,
                                ));
                                let back = _mm256_sub_epi32(
                                    _mm256_setzero_si256(),
                                    _mm256_slli_epi32::<7>(sw),
                                );
                                for r in 0..R {
                                    let xp = x[r].copy.as_ptr().add(b * BLOCK);
                                    let mut i = back;
                                    for c in 0..CHUNKS {
                                        i = $dp(i, chunk_of(xp, c), wv[c]);
                                    }
                                    h[r] = i;
                                }
                            } else {
                                for c in 0..CHUNKS {
                                    let wa = _mm256_abs_epi8(wv[c]);
                                    for r in 0..R {
                                        let xc = chunk_of(x[r].quants.as_ptr().add(b * BLOCK), c);
                                        h[r] = $dp(h[r], wa, _mm256_sign_epi8(xc, wv[c]));
                                    }
                                }
                            }
                            for r in 0..R {
                                let s = _mm256_mul_ps(
                                    _mm256_set1_ps(*x[r].scales.get_unchecked(b)),
                                    dw,
                                );
                                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h[r]), s, acc[r]);
                            }
                        }
                    }
                    tile_of(&acc, None)
                }

                /// `R` activation rows against one Q4_0 (`MIN = false`) or Q4_1 group. One
                /// 32-byte load holds two chunks of all eight rows' block (low and high
                /// nibbles, see `q4_at`); a chunk meets the row's four activations
                /// broadcast, each lane summing its weight row's whole block. Without
                /// VNNI the eight chunks' `maddubs` pairs add up in i16 (≤ 8·2·15·127 <
                /// 2¹⁵) before one widening `madd`.
                ///
                /// # Safety
                /// The CPU must support the path's features.
                #[inline]
                #[target_feature(enable = $features)]
                pub(in super::super) unsafe fn q4<const R: usize, const MIN: bool>(
                    w: Group,
                    x: &[XRow; MR],
                    blocks: usize,
                ) -> Tile {
                    let format = if MIN {
                        WeightFormat::Q4_1
                    } else {
                        WeightFormat::Q4_0
                    };
                    check_group(&w, blocks, format);
                    let nib = _mm256_set1_epi8(0x0F);
                    let mut acc = [_mm256_setzero_ps(); R];
                    let mut mn = [_mm256_setzero_ps(); R];
                    // Q4_1's minimum term is its own chain of fmas. With few rows the main
                    // loop has registers to spare and that chain alone would be latency
                    // bound, so it runs inside the main loop; with more rows it gets a
                    // second pass over the (cached) minimums, so the main loop keeps its
                    // registers. Either way each element sees the same sequence.
                    let inline_min = MIN && R <= 2;
                    for b in 0..blocks {
                        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                        unsafe {
                            let wp = w.quants.as_ptr().add(b * NR * BLOCK / 2) as *const __m256i;
                            prefetch_quants(wp as *const u8, NR * BLOCK / 2);
                            prefetch_per_block(w.scales, NR, b);
                            prefetch_per_block(w.mins, NR, b);
                            let dw = f16x8(w.scales.as_ptr().add(b * NR));
                            // Q4_0's offset of 8, exactly: the dot starts from −8Σx.
                            let start: [__m256i; R] = std::array::from_fn(|r| {
                                if MIN {
                                    _mm256_setzero_si256()
                                } else {
                                    _mm256_set1_epi32(x[r].offsets.get_unchecked(b)[0])
                                }
                            });
                            let mut h = if $vnni {
                                start
                            } else {
                                [_mm256_setzero_si256(); R]
                            };
                            for v in 0..CHUNKS / 2 {
                                let raw = _mm256_loadu_si256(wp.add(v));
                                let q = [
                                    _mm256_and_si256(raw, nib),
                                    _mm256_and_si256(_mm256_srli_epi16::<4>(raw), nib),
                                ];
                                for r in 0..R {
                                    let xp = x[r].quants.as_ptr().add(b * BLOCK);
                                    for (half, &q) in q.iter().enumerate() {
                                        let xc = chunk_of(xp, 2 * v + half);
                                        h[r] = if $vnni {
                                            $dp(h[r], q, xc)
                                        } else {
                                            _mm256_add_epi16(h[r], _mm256_maddubs_epi16(q, xc))
                                        };
                                    }
                                }
                            }
                            for r in 0..R {
                                let i = if $vnni {
                                    h[r]
                                } else {
                                    let wide = _mm256_madd_epi16(h[r], _mm256_set1_epi16(1));
                                    _mm256_add_epi32(wide, start[r])
                                };
                                let s = _mm256_mul_ps(
                                    _mm256_set1_ps(*x[r].scales.get_unchecked(b)),
                                    dw,
                                );
                                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), s, acc[r]);
                            }
                            if inline_min {
                                let mw = f16x8(w.mins.as_ptr().add(b * NR));
                                for r in 0..R {
                                    let sum = _mm256_set1_ps(*x[r].sums.get_unchecked(b));
                                    mn[r] = _mm256_fmadd_ps(mw, sum, mn[r]);
                                }
                            }
                        }
                    }
                    if MIN && !inline_min {
                        for b in 0..blocks {
                            // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                            unsafe {
                                let mw = f16x8(w.mins.as_ptr().add(b * NR));
                                for r in 0..R {
                                    let sum = _mm256_set1_ps(*x[r].sums.get_unchecked(b));
                                    mn[r] = _mm256_fmadd_ps(mw, sum, mn[r]);
                                }
                            }
                        }
                    }
                    tile_of(&acc, MIN.then_some(&mn))
                }

                /// `R` activation rows against one Q4K (`HIGH = false`) or Q5K group: the
                /// integer half-block sums (one lane per row and half, `k_quants`'s
                /// layout), added per block, times `d_x · (d·sc)`; the
                /// minimum term `(dmin·m) · (d_x·Σx)` kept apart and subtracted at the end.
                ///
                /// # Safety
                /// The CPU must support the path's features.
                #[inline]
                #[target_feature(enable = $features)]
                pub(in super::super) unsafe fn q4k<const R: usize, const HIGH: bool>(
                    w: Group,
                    x: &[XRow; MR],
                    blocks: usize,
                ) -> Tile {
                    let format = if HIGH {
                        WeightFormat::Q5K
                    } else {
                        WeightFormat::Q4K
                    };
                    check_group(&w, blocks, format);
                    let qb = format.quant_bytes();
                    let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
                    let mut acc = [_mm256_setzero_ps(); R];
                    let mut mn = [_mm_setzero_ps(); R];
                    let mut d = _mm256_setzero_ps();
                    for b in 0..blocks {
                        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                        unsafe {
                            let p = w.quants.as_ptr().add(b * K_NR * qb);
                            prefetch_quants(p, K_NR * qb);
                            prefetch_per_block(w.sub, 2 * K_NR, b);
                            let q = if HIGH {
                                k_quants::<1>(p)
                            } else {
                                k_quants::<0>(p)
                            };
                            // `[d₀..d₃, dmin₀..dmin₃]`, converted once per super-block.
                            if b % SUB == 0 {
                                let at = (b / SUB) * K_NR;
                                d = _mm256_set_m128(
                                    f16x4(w.mins.as_ptr().add(at)),
                                    f16x4(w.scales.as_ptr().add(at)),
                                );
                            }
                            // `[sc₀..sc₃, m₀..m₃]` times `d`: exact products (11-bit and
                            // 6-bit significands), `[dw₀..dw₃, mw₀..mw₃]`.
                            let sub = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                w.sub.as_ptr().add(b * 2 * K_NR) as *const __m128i,
                            )));
                            let scaled = _mm256_mul_ps(d, sub);
                            let dw = _mm256_permutevar8x32_ps(scaled, pairs);
                            let mw = _mm256_extractf128_ps::<1>(scaled);
                            for r in 0..R {
                                let xc = chunks_of(x[r].copy.as_ptr().add(b * BLOCK));
                                let whole = pair_sums($chunk4(q, xc));
                                let s = _mm256_mul_ps(
                                    _mm256_set1_ps(*x[r].scales.get_unchecked(b)),
                                    dw,
                                );
                                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whole), s, acc[r]);
                                mn[r] = _mm_fmadd_ps(
                                    mw,
                                    _mm_set1_ps(*x[r].sums.get_unchecked(b)),
                                    mn[r],
                                );
                            }
                        }
                    }
                    let mut out = [[0f32; NR]; MR];
                    for r in 0..R {
                        out[r][..K_NR].copy_from_slice(&finish_k(acc[r], mn[r]));
                    }
                    out
                }

                /// `R` activation rows against one Q6K group: per 16-element half the
                /// integer dot less `32·Σx`, times its int8 scale, both halves added as
                /// integers (|Σ| < 2²⁴, exact in f32), then one fma with `d_x · d`.
                ///
                /// # Safety
                /// The CPU must support the path's features.
                #[inline]
                #[target_feature(enable = $features)]
                pub(in super::super) unsafe fn q6k<const R: usize>(
                    w: Group,
                    x: &[XRow; MR],
                    blocks: usize,
                ) -> Tile {
                    check_group(&w, blocks, WeightFormat::Q6K);
                    let qb = WeightFormat::Q6K.quant_bytes();
                    let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
                    // Scales `[lo₀..lo₃, hi₀..hi₃]` into the half sums' lane order.
                    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
                    let mut acc = [_mm256_setzero_ps(); R];
                    let mut dw = _mm256_setzero_ps();
                    for b in 0..blocks {
                        // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                        unsafe {
                            let p = w.quants.as_ptr().add(b * K_NR * qb);
                            prefetch_quants(p, K_NR * qb);
                            prefetch_per_block(w.sub, 2 * K_NR, b);
                            let q = k_quants::<2>(p);
                            let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                w.sub.as_ptr().add(b * 2 * K_NR) as *const __m128i,
                            ));
                            let sc = _mm256_permutevar8x32_epi32(sc, order);
                            if b % SUB == 0 {
                                let d4 = f16x4(w.scales.as_ptr().add((b / SUB) * K_NR));
                                dw = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d4), pairs);
                            }
                            for r in 0..R {
                                let xc = chunks_of(x[r].copy.as_ptr().add(b * BLOCK));
                                let halves = $chunk4w(q, xc);
                                // [−32Σx_lo, −32Σx_hi] repeated: the offset of 32, exactly.
                                let off = std::ptr::read_unaligned(
                                    x[r].offsets.as_ptr().add(b) as *const i64
                                );
                                let halves = _mm256_add_epi32(halves, _mm256_set1_epi64x(off));
                                let whole = pair_sums(_mm256_mullo_epi32(halves, sc));
                                let s = _mm256_mul_ps(
                                    _mm256_set1_ps(*x[r].scales.get_unchecked(b)),
                                    dw,
                                );
                                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(whole), s, acc[r]);
                            }
                        }
                    }
                    let mut out = [[0f32; NR]; MR];
                    for r in 0..R {
                        out[r][..K_NR].copy_from_slice(&finish_k(acc[r], _mm_setzero_ps()));
                    }
                    out
                }
            }
        };
    }

    /// The AVX-512 tiles of Q8_0, Q4_0 and Q4_1: two weight groups side by side in one
    /// 512-bit vector, each lane computing what its lane of the 256-bit tile computes, in
    /// the same order (so the same bits), with half the instructions per product: every
    /// activation broadcast, scale product and conversion serves sixteen weight rows.
    pub(super) mod zmm {
        use super::*;

        /// Every group of `groups` against `R` activation rows, two groups at a time; an
        /// odd last group takes the 256-bit tile. In Q4_0/Q4_1 only the task's `first` row
        /// tile, which brings the weights from memory, prefetches: the later ones read them
        /// from cache, where the prefetches only took issue slots (cached 1024×3072 Q4_0 at
        /// 64–256 rows, one thread: 510–550 GOP/s prefetching, 570–580 not).
        ///
        /// # Safety
        /// The CPU must support AVX-512 F/BW/VL and VNNI (with AVX2, FMA and F16C).
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        pub(in super::super) unsafe fn tiles<const R: usize>(
            m: &QuantMatrix,
            groups: Range<usize>,
            x: &[XRow; MR],
            first: bool,
            emit: &mut impl FnMut(usize, &Tile),
        ) {
            let (format, blocks) = (m.format, m.cols / BLOCK);
            check_rows::<R>(x, blocks, format);
            let mut g = groups.start;
            while g + 1 < groups.end {
                let (a, b) = (m.group(g), m.group(g + 1));
                // SAFETY: the CPU supports this path (caller's contract); the rows were
                // checked for `blocks` blocks, and each kernel checks its groups.
                let (ta, tb) = unsafe {
                    match (format, first) {
                        (WeightFormat::Q8_0, _) => q8_0::<R>(a, b, x, blocks),
                        (WeightFormat::Q4_0, true) => q4::<R, false, true>(a, b, x, blocks),
                        (WeightFormat::Q4_0, false) => q4::<R, false, false>(a, b, x, blocks),
                        (WeightFormat::Q4K, true) => q4k::<R, false, true>(a, b, x, blocks),
                        (WeightFormat::Q4K, false) => q4k::<R, false, false>(a, b, x, blocks),
                        (WeightFormat::Q5K, true) => q4k::<R, true, true>(a, b, x, blocks),
                        (WeightFormat::Q5K, false) => q4k::<R, true, false>(a, b, x, blocks),
                        (WeightFormat::Q6K, true) => q6k::<R, true>(a, b, x, blocks),
                        (WeightFormat::Q6K, false) => q6k::<R, false>(a, b, x, blocks),
                        (_, true) => q4::<R, true, true>(a, b, x, blocks),
                        (_, false) => q4::<R, true, false>(a, b, x, blocks),
                    }
                };
                emit(g, &ta);
                emit(g + 1, &tb);
                g += 2;
            }
            if g < groups.end {
                // SAFETY: as above.
                unsafe { super::avx512_vnni::tiles::<R>(m, g..groups.end, x, emit) };
            }
        }

        /// Blocks ahead of the one being read that the pair tiles prefetch: as many bytes
        /// ahead as [`AHEAD`] is for one group, as each step reads two. (32 read no better
        /// on cold 1024×3072 Q4_0 matmuls at 8–64 rows; git history of docs/performance.md.)
        const PAIR_AHEAD: usize = AHEAD / 2;

        /// Prefetches what the pair tile reads [`PAIR_AHEAD`] blocks past block `k`. Groups
        /// `a` and `b` advance together, and the task's next pair follows `b` in memory (the
        /// groups of one matrix lie end to end, [`Group::follows`]), so `b`'s values `k +
        /// PAIR_AHEAD` blocks on are the stream's, and the other half is one group before
        /// them (`a`'s) or, once they are past `b`'s end, one group after them (the next
        /// pair's second group). Each group prefetched past itself, as the 256-bit tile
        /// does, fetched `b`'s current lines from `a`'s stream and left the next pair's
        /// second group to the hardware.
        #[inline(always)]
        fn prefetch_pair<T>(b: &[T], per_block: usize, k: usize, blocks: usize) {
            let bytes = per_block * size_of::<T>();
            if b.is_empty() || !starts_line(bytes, k) {
                return;
            }
            let p = b.as_ptr().wrapping_add((k + PAIR_AHEAD) * per_block) as *const i8;
            let group = blocks * bytes;
            let other = if k + PAIR_AHEAD < blocks {
                p.wrapping_sub(group)
            } else {
                p.wrapping_add(group)
            };
            prefetch_lines(p, bytes);
            prefetch_lines(other, bytes);
        }

        /// [`check_group`] for both groups of a pair tile, and (in debug builds) that `b`
        /// lies right after `a`, as [`prefetch_pair`] assumes.
        #[inline(always)]
        fn check_pair(a: &Group, b: &Group, blocks: usize, format: WeightFormat) {
            check_group(a, blocks, format);
            check_group(b, blocks, format);
            debug_assert!(b.follows(a), "a pair tile's groups lie end to end");
        }

        /// Group `a`'s 32 bytes at `pa` in the low half, group `b`'s at `pb` in the high.
        ///
        /// # Safety
        /// Both pointers must point at 32 readable bytes.
        #[inline]
        #[target_feature(enable = "avx2,avx512f")]
        unsafe fn both(pa: *const __m256i, pb: *const __m256i) -> __m512i {
            // SAFETY: the caller's contract; unaligned loads.
            unsafe {
                _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_loadu_si256(pa)),
                    _mm256_loadu_si256(pb),
                )
            }
        }

        /// Eight f16 values at `pa` then eight at `pb`, as f32.
        ///
        /// # Safety
        /// Both pointers must point at eight readable u16s.
        #[inline]
        #[target_feature(enable = "avx2,f16c,avx512f")]
        unsafe fn f16x16(pa: *const u16, pb: *const u16) -> __m512 {
            // SAFETY: the caller's contract; unaligned 16-byte reads.
            unsafe {
                _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(
                    _mm256_castsi128_si256(_mm_loadu_si128(pa as *const __m128i)),
                    _mm_loadu_si128(pb as *const __m128i),
                ))
            }
        }

        /// Both groups' tiles from the per-row accumulators (group `a` in the low eight
        /// lanes, `b` in the high), plus Q4_1's minimum term.
        #[inline]
        #[target_feature(enable = "avx2,avx512f")]
        fn finish<const R: usize>(acc: &[__m512; R], mn: Option<&[__m512; R]>) -> (Tile, Tile) {
            let (mut ta, mut tb) = ([[0f32; NR]; MR], [[0f32; NR]; MR]);
            for r in 0..R {
                let rows = match mn {
                    Some(mn) => _mm512_add_ps(acc[r], mn[r]),
                    None => acc[r],
                };
                let mut lanes = [0f32; 2 * NR];
                // SAFETY: `lanes` is 16 f32s; storeu has no alignment requirement.
                unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), rows) };
                ta[r].copy_from_slice(&lanes[..NR]);
                tb[r].copy_from_slice(&lanes[NR..]);
            }
            (ta, tb)
        }

        /// [`super::avx512_vnni::q4`] over groups `a` and `b` at once.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn q4<const R: usize, const MIN: bool, const PREFETCH: bool>(
            a: Group,
            b: Group,
            x: &[XRow; MR],
            blocks: usize,
        ) -> (Tile, Tile) {
            let format = if MIN {
                WeightFormat::Q4_1
            } else {
                WeightFormat::Q4_0
            };
            check_pair(&a, &b, blocks, format);
            let nib = _mm512_set1_epi8(0x0F);
            let mut acc = [_mm512_setzero_ps(); R];
            for k in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    let pa = a.quants.as_ptr().add(k * NR * BLOCK / 2) as *const __m256i;
                    let pb = b.quants.as_ptr().add(k * NR * BLOCK / 2) as *const __m256i;
                    // The pair's stream, [`PAIR_AHEAD`] blocks ahead: unprefetched, a
                    // 16-row Qwen3-0.6B decode step took 75–87 ms (measured); with each
                    // group prefetched past itself 53 ms, as a pair 41–43 (fourteenth).
                    if PREFETCH {
                        prefetch_pair(b.quants, NR * BLOCK / 2, k, blocks);
                        prefetch_pair(b.scales, NR, k, blocks);
                        prefetch_pair(b.mins, NR, k, blocks);
                    }
                    let q: [__m512i; CHUNKS] = std::array::from_fn(|c| {
                        let raw = both(pa.add(c / 2), pb.add(c / 2));
                        if c % 2 == 0 {
                            _mm512_and_si512(raw, nib)
                        } else {
                            _mm512_and_si512(_mm512_srli_epi16::<4>(raw), nib)
                        }
                    });
                    let dw = f16x16(a.scales.as_ptr().add(k * NR), b.scales.as_ptr().add(k * NR));
                    for r in 0..R {
                        let xp = x[r].quants.as_ptr().add(k * BLOCK);
                        // Q4_0's offset of 8, exactly: the dot starts from −8Σx.
                        let mut h = if MIN {
                            _mm512_setzero_si512()
                        } else {
                            _mm512_set1_epi32(x[r].offsets.get_unchecked(k)[0])
                        };
                        for (c, &q) in q.iter().enumerate() {
                            h = _mm512_dpbusd_epi32(h, q, _mm512_set1_epi32(chunk_bits(xp, c)));
                        }
                        let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h), s, acc[r]);
                    }
                }
            }
            if !MIN {
                return finish(&acc, None);
            }
            // The minimum term in a second pass over the (cached) minimums, so the main
            // loop keeps its registers; each element sees the same sequence.
            let mut mn = [_mm512_setzero_ps(); R];
            for k in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    let mw = f16x16(a.mins.as_ptr().add(k * NR), b.mins.as_ptr().add(k * NR));
                    for r in 0..R {
                        let sum = _mm512_set1_ps(*x[r].sums.get_unchecked(k));
                        mn[r] = _mm512_fmadd_ps(mw, sum, mn[r]);
                    }
                }
            }
            finish(&acc, Some(&mn))
        }

        /// [`super::avx512_vnni::q4k`] over K-quant groups `a` and `b` at once (Q4K, or
        /// Q5K with `HIGH`): each 256-bit vector of the one-group tile becomes the low half
        /// (`a`) and high half (`b`) of one 512-bit vector, so a row's block takes four
        /// `vpdpbusd` for eight weight rows instead of four for four. Lanes `2j` and `2j + 1`
        /// of each half hold weight row `j`'s half-block sums, paired as there; per lane the
        /// same float steps, so the same bits.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn q4k<const R: usize, const HIGH: bool, const PREFETCH: bool>(
            a: Group,
            b: Group,
            x: &[XRow; MR],
            blocks: usize,
        ) -> (Tile, Tile) {
            let format = if HIGH {
                WeightFormat::Q5K
            } else {
                WeightFormat::Q4K
            };
            check_pair(&a, &b, blocks, format);
            let qb = format.quant_bytes();
            let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
            let mut acc = [_mm512_setzero_ps(); R];
            let mut mn = [_mm256_setzero_ps(); R];
            let (mut da, mut db) = (_mm_setzero_ps(), _mm_setzero_ps());
            for k in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    if PREFETCH {
                        prefetch_pair(b.quants, K_NR * qb, k, blocks);
                        prefetch_pair(b.sub, 2 * K_NR, k, blocks);
                    }
                    let q = if HIGH {
                        k_pair_quants::<1>(&a, &b, k * K_NR * qb)
                    } else {
                        k_pair_quants::<0>(&a, &b, k * K_NR * qb)
                    };
                    // Each group's `d₀..d₃`, once per super-block.
                    if k % SUB == 0 {
                        let at = (k / SUB) * K_NR;
                        (da, db) = (
                            f16x4(a.scales.as_ptr().add(at)),
                            f16x4(b.scales.as_ptr().add(at)),
                        );
                    }
                    // Each group's `dw₀..dw₃ = d·sc`, as the one-group tile forms them, in
                    // the lanes of their half sums.
                    let scaled = |g: &Group, d: __m128| {
                        let sc = _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(
                            std::ptr::read_unaligned(g.sub.as_ptr().add(k * 2 * K_NR) as *const i32),
                        )));
                        _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(d, sc)), pairs)
                    };
                    let dw = _mm512_insertf32x8::<1>(
                        _mm512_castps256_ps512(scaled(&a, da)),
                        scaled(&b, db),
                    );
                    for r in 0..R {
                        let h = k_pair_dot(&q, x[r].copy.as_ptr().add(k * BLOCK));
                        let whole = _mm512_add_epi32(h, _mm512_shuffle_epi32::<0b10_11_00_01>(h));
                        let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(whole), s, acc[r]);
                    }
                }
            }
            // The minimum term in a second pass over the (cached) scales, so the main loop
            // keeps its registers; each element sees the same sequence.
            let (mut ma, mut mb) = (_mm_setzero_ps(), _mm_setzero_ps());
            for k in 0..blocks {
                // SAFETY: as above.
                unsafe {
                    // Each group's `dmin₀..dmin₃`, once per super-block.
                    if k % SUB == 0 {
                        let at = (k / SUB) * K_NR;
                        (ma, mb) = (
                            f16x4(a.mins.as_ptr().add(at)),
                            f16x4(b.mins.as_ptr().add(at)),
                        );
                    }
                    let m = |g: &Group| {
                        _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(
                            std::ptr::read_unaligned(
                                g.sub.as_ptr().add(k * 2 * K_NR + K_NR) as *const i32
                            ),
                        )))
                    };
                    let mw = _mm256_set_m128(_mm_mul_ps(mb, m(&b)), _mm_mul_ps(ma, m(&a)));
                    for r in 0..R {
                        let sum = _mm256_set1_ps(*x[r].sums.get_unchecked(k));
                        mn[r] = _mm256_fmadd_ps(mw, sum, mn[r]);
                    }
                }
            }
            finish_k_pair(&acc, &mn)
        }

        /// Block quants of K-quant groups `a` (low halves) and `b` (high) at byte `at` of
        /// each, as [`k_quants`] widens one group's.
        ///
        /// # Safety
        /// Both groups must hold a block's quants at `at`.
        #[inline]
        #[target_feature(enable = "avx2,avx512f")]
        unsafe fn k_pair_quants<const EXTRA: usize>(
            a: &Group,
            b: &Group,
            at: usize,
        ) -> [__m512i; 4] {
            // SAFETY: the caller's contract.
            let (qa, qb) = unsafe {
                (
                    k_quants::<EXTRA>(a.quants.as_ptr().add(at)),
                    k_quants::<EXTRA>(b.quants.as_ptr().add(at)),
                )
            };
            std::array::from_fn(|c| _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qa[c]), qb[c]))
        }

        /// One activation block (its four arranged chunks of eight at `xp`) against a K-quant
        /// pair's block: per lane the half-block sums, as `chunk4` gives one group's.
        ///
        /// # Safety
        /// `xp` must point at 32 readable bytes.
        #[inline]
        #[target_feature(enable = "avx2,avx512f,avx512vnni")]
        unsafe fn k_pair_dot(q: &[__m512i; 4], xp: *const i8) -> __m512i {
            let xp = xp as *const i64;
            let mut h = _mm512_setzero_si512();
            for (c, &qc) in q.iter().enumerate() {
                // SAFETY: the caller's contract; unaligned 8-byte reads.
                let xc = _mm512_set1_epi64(unsafe { std::ptr::read_unaligned(xp.add(c)) });
                h = _mm512_dpbusd_epi32(h, qc, xc);
            }
            h
        }

        /// Both K-quant groups' tiles: weight row `j`'s lane `2j` of each half of `acc`
        /// less its minimum term (`a`'s four in `mn`'s low lanes, `b`'s in the high).
        #[inline]
        #[target_feature(enable = "avx2,avx512f")]
        fn finish_k_pair<const R: usize>(acc: &[__m512; R], mn: &[__m256; R]) -> (Tile, Tile) {
            let (mut ta, mut tb) = ([[0f32; NR]; MR], [[0f32; NR]; MR]);
            for r in 0..R {
                let (mut lanes, mut m) = ([0f32; 16], [0f32; 8]);
                // SAFETY: `lanes` is 16 f32s and `m` 8; storeu has no alignment requirement.
                unsafe {
                    _mm512_storeu_ps(lanes.as_mut_ptr(), acc[r]);
                    _mm256_storeu_ps(m.as_mut_ptr(), mn[r]);
                }
                for j in 0..K_NR {
                    ta[r][j] = lanes[2 * j] - m[j];
                    tb[r][j] = lanes[8 + 2 * j] - m[K_NR + j];
                }
            }
            (ta, tb)
        }

        /// [`super::avx512_vnni::q6k`] over Q6K groups `a` and `b` at once, as [`q4k`]
        /// widens the Q4K tile: per lane the same integer halves, offsets, sub-scale
        /// products and float steps, so the same bits.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn q6k<const R: usize, const PREFETCH: bool>(
            a: Group,
            b: Group,
            x: &[XRow; MR],
            blocks: usize,
        ) -> (Tile, Tile) {
            check_pair(&a, &b, blocks, WeightFormat::Q6K);
            let qb = WeightFormat::Q6K.quant_bytes();
            let pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
            // Sub-scales `[lo₀..lo₃, hi₀..hi₃]` into the half sums' lane order.
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            let mut acc = [_mm512_setzero_ps(); R];
            let mut dw = _mm512_setzero_ps();
            for k in 0..blocks {
                // SAFETY: `check_rows` and `check_pair` keep every load in bounds.
                unsafe {
                    if PREFETCH {
                        prefetch_pair(b.quants, K_NR * qb, k, blocks);
                        prefetch_pair(b.sub, 2 * K_NR, k, blocks);
                    }
                    let q = k_pair_quants::<2>(&a, &b, k * K_NR * qb);
                    let sc_of = |g: &Group| {
                        _mm256_permutevar8x32_epi32(
                            _mm256_cvtepi8_epi32(_mm_loadl_epi64(
                                g.sub.as_ptr().add(k * 2 * K_NR) as *const __m128i
                            )),
                            order,
                        )
                    };
                    let sc = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(sc_of(&a)), sc_of(&b));
                    if k % SUB == 0 {
                        let at = (k / SUB) * K_NR;
                        let d = |g: &Group| {
                            _mm256_permutevar8x32_ps(
                                _mm256_castps128_ps256(f16x4(g.scales.as_ptr().add(at))),
                                pairs,
                            )
                        };
                        dw = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(d(&a)), d(&b));
                    }
                    for r in 0..R {
                        let h = k_pair_dot(&q, x[r].copy.as_ptr().add(k * BLOCK));
                        // [−32Σx_lo, −32Σx_hi] repeated: the offset of 32, exactly.
                        let off =
                            std::ptr::read_unaligned(x[r].offsets.as_ptr().add(k) as *const i64);
                        let halves = _mm512_add_epi32(h, _mm512_set1_epi64(off));
                        let prod = _mm512_mullo_epi32(halves, sc);
                        let whole =
                            _mm512_add_epi32(prod, _mm512_shuffle_epi32::<0b10_11_00_01>(prod));
                        let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(whole), s, acc[r]);
                    }
                }
            }
            finish_k_pair(&acc, &[_mm256_setzero_ps(); R])
        }

        /// [`super::avx512_vnni::q8_0`] over groups `a` and `b` at once.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
        unsafe fn q8_0<const R: usize>(
            a: Group,
            b: Group,
            x: &[XRow; MR],
            blocks: usize,
        ) -> (Tile, Tile) {
            check_pair(&a, &b, blocks, WeightFormat::Q8_0);
            let mut acc = [_mm512_setzero_ps(); R];
            for k in 0..blocks {
                // SAFETY: `check_rows` and `check_group` keep every load in bounds.
                unsafe {
                    let pa = a.quants.as_ptr().add(k * NR * BLOCK) as *const __m256i;
                    let pb = b.quants.as_ptr().add(k * NR * BLOCK) as *const __m256i;
                    // Every row tile prefetches here: without the prefetches LLVM
                    // interleaved the rows' dots and spilled their broadcasts, and cached
                    // Q8_0 tiles ran at 0.8× (measured).
                    prefetch_pair(b.quants, NR * BLOCK, k, blocks);
                    prefetch_pair(b.scales, NR, k, blocks);
                    prefetch_pair(b.sums, NR, k, blocks);
                    let wv: [__m512i; CHUNKS] = std::array::from_fn(|c| both(pa.add(c), pb.add(c)));
                    let sw = _mm512_cvtepi16_epi32(_mm256_inserti128_si256::<1>(
                        _mm256_castsi128_si256(_mm_loadu_si128(
                            a.sums.as_ptr().add(k * NR) as *const __m128i
                        )),
                        _mm_loadu_si128(b.sums.as_ptr().add(k * NR) as *const __m128i),
                    ));
                    // The biased activations' extra `128·Σw`, taken back from the start.
                    let back = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(sw));
                    let dw = f16x16(a.scales.as_ptr().add(k * NR), b.scales.as_ptr().add(k * NR));
                    for r in 0..R {
                        let xp = x[r].copy.as_ptr().add(k * BLOCK);
                        let mut h = back;
                        for (c, &w) in wv.iter().enumerate() {
                            h = _mm512_dpbusd_epi32(h, _mm512_set1_epi32(chunk_bits(xp, c)), w);
                        }
                        let s = _mm512_mul_ps(_mm512_set1_ps(*x[r].scales.get_unchecked(k)), dw);
                        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h), s, acc[r]);
                    }
                }
            }
            finish(&acc, None)
        }
    }

    simd_path!(
        avx2,
        "avx2,fma,f16c",
        false,
        dp_avx2,
        chunk4_avx2,
        chunk4w_avx2
    );
    // VNNI accumulates in i32, so 6-bit quants need no wider variant.
    simd_path!(
        avx_vnni,
        "avx2,fma,f16c,avxvnni",
        true,
        dp_avx_vnni,
        chunk4_avx_vnni,
        chunk4_avx_vnni
    );
    simd_path!(
        avx512_vnni,
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        true,
        dp_avx512_vnni,
        chunk4_avx512_vnni,
        chunk4_avx512_vnni
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Activation rows quantize to the same bytes and scales on every kernel: ties at
    /// exactly half a step (both signs), the clamp at ±127, zero blocks, signed zeros and
    /// sub-normal scales, and ordinary values.
    #[test]
    fn activation_rows_quantize_to_the_portable_bytes_on_every_kernel_this_cpu_runs() {
        let mut x: Vec<f32> = Vec::new();
        // amax 127 makes the step 1, so k + 0.5 is an exact tie.
        x.extend((0..BLOCK).map(|i| if i == 0 { 127.0 } else { i as f32 - 15.5 }));
        x.extend((0..BLOCK).map(|i| if i == 3 { -127.0 } else { 0.5 - i as f32 }));
        x.extend([0.0f32; BLOCK]);
        x.extend((0..BLOCK).map(|i| if i % 2 == 0 { -0.0 } else { 1e-40 }));
        let mut seed = 0x1234_5678_u32;
        x.extend((0..8 * BLOCK).map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32 - 0.5) * 7.0
        }));
        let blocks = x.len() / BLOCK;
        let quantize = |kernel| {
            let (mut q, mut d) = (vec![0i8; x.len()], vec![0f32; blocks]);
            let mut halves = vec![[0i32; 2]; blocks];
            quantize_row(&x, &mut q, &mut d, &mut halves, kernel);
            (q, d.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), halves)
        };
        let want = quantize(CpuKernel::Portable);
        for (h, q) in want.2.iter().zip(want.0.chunks_exact(BLOCK)) {
            let sum = |q: &[i8]| q.iter().map(|&v| v as i32).sum::<i32>();
            assert_eq!(*h, [sum(&q[..16]), sum(&q[16..])]);
        }
        for kernel in CpuKernel::supported() {
            assert_eq!(quantize(kernel), want, "{kernel}");
        }
    }
}
