//! `DenseMatrix`: f32 weights and their matmul, one fixed order of operations per output
//! element whatever the batch, so the exact path is batch-invariant like the quantized one
//! (a general GEMM picks its blocking by the row count, and with it the summation order:
//! a prompt token scored inside a prefill differed from the same token decoded by ~1e-6).
//!
//! Each output is `x · w` as eight lane sums over `k` in steps of eight (one fused
//! multiply-add per element, in order), a fixed tree over the lanes, then the tail in order.
//! Tiles of up to `MR` activation rows × `NR` weight rows only decide which outputs are
//! computed together, never how one is computed. The AVX2 build is the same code compiled
//! with FMA, so it gives the portable build's bits.

use super::huge_buf::HugeBuf;
use crate::kernels::compute_pool::ComputePool;
use crate::kernels::cpu_kernel::CpuKernel;

/// Activation rows per tile.
const MR: usize = 4;
/// Weight rows per tile: with `MR`, twelve accumulators of eight lanes (AVX2's 16 registers
/// minus the loads).
const NR: usize = 3;
const LANES: usize = 8;
/// Activation rows walked per weight panel, so the panel stays in L1 while they stream.
const ROW_BLOCK: usize = 64;

pub struct DenseMatrix {
    /// `[n, k]`, row major, on huge pages as the quantized weights are.
    w: HugeBuf<f32>,
    n: usize,
    k: usize,
}

impl DenseMatrix {
    pub fn new(w: Vec<f32>, n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "a dense matrix holds n × k weights");
        Self { w: w.into(), n, k }
    }

    pub fn rows(&self) -> usize {
        self.n
    }

    pub fn cols(&self) -> usize {
        self.k
    }

    /// `y = x · Wᵀ`: `x` `[m, k]`, `y` `[m, n]`.
    pub fn matmul_into(&self, x: &[f32], m: usize, y: &mut [f32]) {
        self.matmul_with(x, m, y, CpuKernel::active());
    }

    /// As `matmul_into` on the portable build, whatever the CPU: for tests.
    pub fn matmul_portable_into(&self, x: &[f32], m: usize, y: &mut [f32]) {
        self.matmul_with(x, m, y, CpuKernel::Portable);
    }

    fn matmul_with(&self, x: &[f32], m: usize, y: &mut [f32], kernel: CpuKernel) {
        assert_eq!(x.len(), m * self.k, "activations are [m, k]");
        assert_eq!(y.len(), m * self.n, "outputs are [m, n]");
        let tiles = self.n.div_ceil(NR);
        // Enough column tasks for two threads to balance, each a whole number of tiles.
        let pool = ComputePool::global();
        let per_task = tiles.div_ceil(4 * pool.threads()).max(1) * NR;
        let out = Outputs(y.as_mut_ptr());
        pool.run(self.n.div_ceil(per_task), &|t| {
            let cols = t * per_task..((t + 1) * per_task).min(self.n);
            let job = Job {
                w: self,
                x,
                m,
                cols,
                out: &out,
            };
            run(kernel, job);
        });
    }
}

/// The output buffer, shared by tasks that write disjoint columns.
struct Outputs(*mut f32);
// SAFETY: tasks write disjoint `(row, col)` elements only (see `Job::run`).
unsafe impl Sync for Outputs {}

struct Job<'a> {
    w: &'a DenseMatrix,
    x: &'a [f32],
    m: usize,
    cols: std::ops::Range<usize>,
    out: &'a Outputs,
}

impl Job<'_> {
    #[inline(always)]
    fn run(self) {
        let k = self.w.k;
        for rows in (0..self.m).step_by(ROW_BLOCK) {
            let rows = rows..(rows + ROW_BLOCK).min(self.m);
            for col in self.cols.clone().step_by(NR) {
                let nr = NR.min(self.cols.end - col);
                let w = &self.w.w[col * k..(col + nr) * k];
                for row in rows.clone().step_by(MR) {
                    let mr = MR.min(rows.end - row);
                    let x = &self.x[row * k..(row + mr) * k];
                    // Const shapes keep every accumulator in a register.
                    match (mr, nr) {
                        (4, 3) => self.store(row, col, tile::<4, 3>(x, w, k)),
                        (4, 2) => self.store(row, col, tile::<4, 2>(x, w, k)),
                        (4, _) => self.store(row, col, tile::<4, 1>(x, w, k)),
                        (3, 3) => self.store(row, col, tile::<3, 3>(x, w, k)),
                        (3, 2) => self.store(row, col, tile::<3, 2>(x, w, k)),
                        (3, _) => self.store(row, col, tile::<3, 1>(x, w, k)),
                        (2, 3) => self.store(row, col, tile::<2, 3>(x, w, k)),
                        (2, 2) => self.store(row, col, tile::<2, 2>(x, w, k)),
                        (2, _) => self.store(row, col, tile::<2, 1>(x, w, k)),
                        (_, 3) => self.store(row, col, tile::<1, 3>(x, w, k)),
                        (_, 2) => self.store(row, col, tile::<1, 2>(x, w, k)),
                        (_, _) => self.store(row, col, tile::<1, 1>(x, w, k)),
                    }
                }
            }
        }
    }

    #[inline(always)]
    fn store<const R: usize, const C: usize>(&self, row: usize, col: usize, sums: [[f32; C]; R]) {
        let n = self.w.n;
        for (r, row_sums) in sums.iter().enumerate() {
            for (c, &v) in row_sums.iter().enumerate() {
                // SAFETY: `(row + r, col + c)` is inside `[m, n]` and in this task's
                // columns, which no other task writes.
                unsafe { *self.out.0.add((row + r) * n + col + c) = v };
            }
        }
    }
}

/// Dot products of `R` activation rows with `C` weight rows, each in the module's order.
#[inline(always)]
fn tile<const R: usize, const C: usize>(x: &[f32], w: &[f32], k: usize) -> [[f32; C]; R] {
    let mut acc = [[[0.0f32; LANES]; C]; R];
    let full = k / LANES * LANES;
    for c in (0..full).step_by(LANES) {
        let mut ws = [[0.0f32; LANES]; C];
        for j in 0..C {
            ws[j].copy_from_slice(&w[j * k + c..j * k + c + LANES]);
        }
        for r in 0..R {
            let mut xs = [0.0f32; LANES];
            xs.copy_from_slice(&x[r * k + c..r * k + c + LANES]);
            for j in 0..C {
                for l in 0..LANES {
                    acc[r][j][l] = xs[l].mul_add(ws[j][l], acc[r][j][l]);
                }
            }
        }
    }
    let mut out = [[0.0f32; C]; R];
    for r in 0..R {
        for j in 0..C {
            let a = &acc[r][j];
            let mut s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
            for i in full..k {
                s = x[r * k + i].mul_add(w[j * k + i], s);
            }
            out[r][j] = s;
        }
    }
    out
}

/// Runs `job` on the portable build or, on every other kernel path (each implies AVX2 and
/// FMA), the AVX2 build.
fn run(kernel: CpuKernel, job: Job) {
    match kernel {
        CpuKernel::Portable => job.run(),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a non-portable kernel is only active on a CPU with AVX2 and FMA.
        _ => unsafe { run_avx2(job) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => job.run(),
    }
}

/// The same code as the portable build, compiled with 256-bit vectors and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(job: Job) {
    job.run()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    #[test]
    fn a_row_gets_the_same_bits_alone_and_among_any_number_of_rows() {
        for (n, k) in [(7usize, 13usize), (50, 64), (96, 576), (5, 3)] {
            let w = DenseMatrix::new(random(n * k, 1), n, k);
            let x = random(37 * k, 2);
            let mut all = vec![0.0; 37 * n];
            w.matmul_into(&x, 37, &mut all);
            for m in [1usize, 2, 3, 5, 9] {
                let mut some = vec![0.0; m * n];
                w.matmul_into(&x[(37 - m) * k..], m, &mut some);
                let tail = &all[(37 - m) * n..];
                assert!(
                    some.iter()
                        .zip(tail)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "n {n} k {k}: the last {m} rows differ from the same rows among 37"
                );
            }
        }
    }

    #[test]
    fn the_detected_build_equals_the_portable_one_and_a_plain_dot_product() {
        let (n, k, m) = (23usize, 100usize, 6usize);
        let w = DenseMatrix::new(random(n * k, 3), n, k);
        let x = random(m * k, 4);
        let (mut fast, mut portable) = (vec![0.0; m * n], vec![0.0; m * n]);
        w.matmul_into(&x, m, &mut fast);
        w.matmul_portable_into(&x, m, &mut portable);
        assert!(fast
            .iter()
            .zip(&portable)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        for r in 0..m {
            for c in 0..n {
                let want: f64 = (0..k)
                    .map(|i| x[r * k + i] as f64 * w.w[c * k + i] as f64)
                    .sum();
                let got = fast[r * n + c] as f64;
                assert!((got - want).abs() < 1e-4, "({r}, {c}): {got} vs {want}");
            }
        }
    }
}
