//! Activation rows as the tiles read them: each row quantized once per matmul to int8 blocks
//! of 32 ([`QuantizedActivations`], one [`XRow`] a row), with what each weight format adds
//! (Q4_0/Q5_0/Q6K offsets, Q4_1/Q5_1/Q4K/Q5K sums, K-quant chunk order, Q8_0's biased
//! copy), and an optional norm fused in ([`Input`], [`RowNorm`]). Quantizing runs on the
//! x86 row quantizers where the kernel has them, the portable one otherwise: the same
//! bytes.

use super::quantize_block::quantize_block;
use super::weight_format::WeightFormat;
#[cfg(target_arch = "x86_64")]
use super::x86::quantize;
use super::{BLOCK, MR};
use crate::kernels::compute_pool::{ComputePool, Shards};
use crate::kernels::cpu_kernel::CpuKernel;
use std::cell::RefCell;
use std::ops::Range;

/// Activation elements above which quantizing them is split across threads.
const MIN_PARALLEL_QUANTIZE: usize = 1 << 16;

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
    pub(super) m: usize,
    k: usize,
    quants: Vec<i8>,
    /// The quants as a format's tiles broadcast them. K-quants: per block its four chunks
    /// of eight (chunk `c`: quants `4c..4c+4` then `16+4c..16+4c+4`, as `k_quants` groups
    /// the weights). Q8_0: each quant plus 128, as u8 bits (VNNI multiplies u8 by i8; the
    /// weights stay signed and the tile takes `128·Σw` back); filled only on VNNI paths
    /// for two or more rows, the tiles that read it. Q4_0, Q4_1, Q5_0, Q5_1: unused.
    copy: Vec<i8>,
    scales: Vec<f32>,
    /// Q4_0: `[−8 · Σ quants, 0]` per block (its offset of 8), Q5_0 likewise `[−16 · Σ, 0]`;
    /// Q6K: `−32 · Σ` over each block's first and second halves. Negated, so a VNNI kernel
    /// can start its dot product from it.
    offsets: Vec<[i32; 2]>,
    /// `d_x · Σ quants` per block (Q4_1's, Q5_1's and Q4K/Q5K's minimum term).
    sums: Vec<f32>,
}

/// One quantized activation row, as the tile kernels read it.
#[derive(Clone, Copy)]
pub(super) struct XRow<'a> {
    pub(super) quants: &'a [i8],
    pub(super) copy: &'a [i8],
    pub(super) scales: &'a [f32],
    pub(super) offsets: &'a [[i32; 2]],
    pub(super) sums: &'a [f32],
}

impl QuantizedActivations {
    pub(super) fn quantize(
        &mut self,
        x: Input,
        m: usize,
        k: usize,
        format: WeightFormat,
        kernel: CpuKernel,
    ) {
        let Input { x, norm } = x;
        let blocks = k / BLOCK;
        self.m = m;
        self.k = k;
        self.quants.resize(m * k, 0);
        self.copy.resize(m * k, 0);
        self.scales.resize(m * blocks, 0.0);
        // Q4_0, Q5_0 and Q6K subtract their offset per half block; Q4_1, Q5_1, Q4K and
        // Q5K add a minimum term per block; Q8_0 needs neither.
        let (offsets, sums) = match format {
            WeightFormat::Q8_0 => (0, 0),
            WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q6K => (m * blocks, 0),
            WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q4K | WeightFormat::Q5K => {
                (0, m * blocks)
            }
        };
        self.offsets.resize(offsets, [0; 2]);
        self.sums.resize(sums, 0.0);
        // Only VNNI tiles of two or more rows read Q8_0's biased copy.
        let biased = m > 1
            && matches!(
                kernel,
                CpuKernel::AvxVnni
                    | CpuKernel::Avx512Vnni
                    | CpuKernel::Amx
                    | CpuKernel::AmxEmulated
            );
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
                    WeightFormat::Q4_0
                    | WeightFormat::Q4_1
                    | WeightFormat::Q5_0
                    | WeightFormat::Q5_1 => {}
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
                        *o = match format {
                            WeightFormat::Q6K => [-32 * lo, -32 * hi],
                            WeightFormat::Q5_0 => [-16 * (lo + hi), 0],
                            _ => [-8 * (lo + hi), 0],
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

    pub(super) fn row(&self, r: usize) -> XRow<'_> {
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
        // `Avx512Vnni`'s and the AMX paths'.
        unsafe {
            if kernel.has_avx512() {
                quantize::quantize_row_avx512(src, dst, scales, halves)
            } else {
                quantize::quantize_row(src, dst, scales, halves)
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

/// Checks every read of the activation rows a tile of `blocks` blocks makes is in
/// bounds, so the loops can use raw loads. Once per run of groups.
pub(super) fn check_rows<const R: usize>(x: &[XRow; MR], blocks: usize, format: WeightFormat) {
    for row in &x[..R] {
        assert!(row.quants.len() >= blocks * BLOCK && row.scales.len() >= blocks);
        match format {
            WeightFormat::Q8_0 => assert!(row.copy.len() >= blocks * BLOCK),
            WeightFormat::Q4_0 | WeightFormat::Q5_0 => assert!(row.offsets.len() >= blocks),
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => assert!(row.sums.len() >= blocks),
            WeightFormat::Q6K => {
                assert!(row.offsets.len() >= blocks && row.copy.len() >= blocks * BLOCK)
            }
            WeightFormat::Q4K | WeightFormat::Q5K => {
                assert!(row.sums.len() >= blocks && row.copy.len() >= blocks * BLOCK)
            }
        }
    }
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
